"""What a submission says about the tasks' environment: ``--env`` variables, the submitting
shell's variables (local mode) and the directory it was submitted from. Validated here, so a bad
name is a 400 naming its field; the inherited values are stored with the job and never returned.
"""

from __future__ import annotations

from shoal.server.context import ApiError
from shoal.server.schemas import SubmitRequest
from shoal.spec.model import JobSpec
from shoal.spec.patterns import ENV_NAME_RE

# shoal's own settings and credentials (SHOAL_TOKEN, SHOAL_URL, ...) are never inherited
RESERVED_PREFIX = "SHOAL_"


def check_variables(request: SubmitRequest) -> None:
    """Every variable name is an identifier and no value holds a NUL byte (400 otherwise)."""
    fields = (("env", request.env), ("environment", request.environment or {}))
    for field, variables in fields:
        for name, value in variables.items():
            if not ENV_NAME_RE.match(name):
                raise ApiError(
                    400,
                    "InvalidEnvironment",
                    f"{field}: {name!r} is not a variable name; use letters, digits and '_', "
                    "not starting with a digit",
                )
            if "\0" in value:
                raise ApiError(
                    400, "InvalidEnvironment", f"{field}: the value of {name} holds a NUL byte"
                )


def with_cli_env(spec: JobSpec, env: dict[str, str]) -> JobSpec:
    """The spec with ``--env`` variables over the job file's (job-level and every role's)."""
    if not env:
        return spec
    roles = tuple(role.model_copy(update={"env": {**role.env, **env}}) for role in spec.roles)
    return spec.model_copy(update={"env": {**spec.env, **env}, "roles": roles})


def inherited(request: SubmitRequest) -> dict[str, str] | None:
    if request.environment is None:
        return None
    return {k: v for k, v in request.environment.items() if not k.startswith(RESERVED_PREFIX)}


def workdir_warning(request: SubmitRequest) -> dict[str, object] | None:
    """Where tasks start when the job brings no code directory."""
    if request.code_archive is not None or request.code_hash is not None:
        return None
    if request.workdir is not None:
        message = (
            f"the job has no code directory: its tasks start in {request.workdir}, the "
            "directory it was submitted from (an empty directory on a node where it does not "
            "exist)"
        )
    else:
        message = "the job has no code directory: its tasks start in an empty directory"
    return {"path": "code_dir", "message": message, "hint": None, "line": None}
