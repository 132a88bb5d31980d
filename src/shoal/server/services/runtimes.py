"""How a submitted job runs: its runtime, and the images a container job needs.

The runtime is the job file's (``runtime:``), else the submission's (``--runtime``), else the
server's ``default_runtime``; the resolved value is stored in the job's spec, so a later change of
the default never changes a queued job. A container job needs an image for every role, named
``NAME[:TAG]``; a refusal names the field in the format's own words (``roles.<role>.image``,
``taskRoles.<role>.dockerImage``, ...) and the fix.
"""

from __future__ import annotations

from shoal.image_archives import ImageNameError, normalise_name
from shoal.server.context import ApiError, ServerContext
from shoal.server.schemas import SubmitRequest
from shoal.spec.errors import SpecProblem
from shoal.spec.loader import IMAGE_PATHS
from shoal.spec.model import JobSpec, Runtime, SourceFormat


def fallback_runtime(ctx: ServerContext, request: SubmitRequest) -> Runtime:
    """The runtime of a job whose file does not say."""
    return Runtime(request.runtime or ctx.settings.default_runtime)


def resolve(
    fallback: Runtime,
    request: SubmitRequest,
    fmt: SourceFormat,
    specs: list[JobSpec],
    warnings: list[dict[str, object]],
) -> list[JobSpec]:
    """The specs with their runtime set; a 400 ``InvalidJobSpec`` if a container job lacks an
    image or names one that cannot be a name. A ``--runtime`` the file overrides is warned of."""
    resolved = [
        spec if spec.runtime is not None else spec.model_copy(update={"runtime": fallback})
        for spec in specs
    ]
    overridden = {
        spec.runtime for spec in specs if spec.runtime is not None and spec.runtime != fallback
    }
    if request.runtime is not None and overridden:
        said = ", ".join(sorted(runtime.value for runtime in overridden))
        warnings.append(
            SpecProblem(
                "runtime",
                f"--runtime {request.runtime} is not used: the job file says runtime: {said}",
            ).to_dict()
        )
    problems = [
        problem
        for spec in resolved
        if spec.runtime is Runtime.CONTAINER
        for problem in _image_problems(fmt, spec)
    ]
    if problems:
        raise ApiError(
            400,
            "InvalidJobSpec",
            "the job file has errors: " + "; ".join(p.render() for p in problems[:5]),
            [p.to_dict() for p in problems],
        )
    return resolved


def _image_problems(fmt: SourceFormat, spec: JobSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    for role in spec.roles:
        path = IMAGE_PATHS[fmt].format(role=role.name)
        if path in seen:
            continue
        seen.add(path)
        if role.image is None:
            problems.append(
                SpecProblem(
                    path,
                    f"role {role.name} has no image, and the job runs in containers "
                    "(runtime container)",
                    "name a pushed image (`shoal image list`; `shoal image push NAME:TAG` adds "
                    "one), or run the job as processes (`runtime: process`, `--runtime process`)",
                )
            )
            continue
        try:
            normalise_name(role.image)
        except ImageNameError as exc:
            problems.append(SpecProblem(path, str(exc)))
    return problems
