"""Errors as OpenPAI's description has them: a route answers only the statuses it describes, with
a ``code`` from the description's list (``Response.code``). shoal's own refusals are translated
here, keeping their messages: the reason stays readable, the shape stays OpenPAI's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shoal.server.context import ApiError

# Response.code in openpai-rest-api-v2.swagger.yaml
CODES = frozenset(
    {
        "BadConfigurationError",
        "ConflictJobError",
        "ConflictUserError",
        "ConflictVcError",
        "ForbiddenUserError",
        "ForbiddenKeyError",
        "IncorrectPasswordError",
        "InvalidParametersError",
        "NoApiError",
        "NoJobError",
        "NoJobConfigError",
        "NoJobSshInfoError",
        "NoUserError",
        "NoGroupError",
        "NoVirtualClusterError",
        "ReadOnlyJobError",
        "RemoveAdminError",
        "ReadOnlyVcError",
        "RemoveRunningVcError",
        "UnauthorizedUserError",
        "NoEnoughQuotaError",
        "NotImplementedError",
        "UnknownError",
        # used by the description's own error examples, though its list lacks them
        "NoStorageError",
        "NoTagError",
        "NoTaskError",
        "NoTaskLogError",
    }
)


# shoal's refusals for which the description's list has a closer code than InvalidParametersError:
# a job that asks more than its virtual cluster may ever use
CLOSER = {
    "ExceedsVirtualClusterLimit": "NoEnoughQuotaError",
    "ExceedsUserGPUCap": "NoEnoughQuotaError",
}


def described(error: ApiError, statuses: frozenset[int]) -> ApiError:
    """``error`` as a route that describes ``statuses`` may answer it."""
    if (error.status in statuses and error.code in CODES) or error.status == 507:
        return error  # 507: the disk is full (docs/disk.md), which no description foresaw
    if error.status in (401, 403) and error.status in statuses:
        code = "UnauthorizedUserError" if error.status == 401 else "ForbiddenUserError"
        return ApiError(error.status, code, error.message, error.problems, error.headers)
    if error.status < 500 and 400 in statuses:  # a refusal of the request as sent
        code = CLOSER.get(error.code, "InvalidParametersError")
        return ApiError(400, code, error.message, error.problems)
    if error.status == 404 and 404 in statuses:
        return ApiError(404, error.code if error.code in CODES else "NoJobError", error.message)
    return ApiError(500, "UnknownError", error.message, error.problems)


@contextmanager
def answering(*statuses: int) -> Iterator[None]:
    """Translate shoal's refusals raised inside to what a route describing ``statuses`` may say."""
    allowed = frozenset(statuses)
    try:
        yield
    except ApiError as exc:
        raise described(exc, allowed) from None
