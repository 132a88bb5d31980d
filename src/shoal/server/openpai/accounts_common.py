"""What the OpenPAI v2 account routers share: the answer ``{message}`` and the refusal of
application tokens. (A body that does not validate is OpenPAI's 400 ``InvalidParametersError``
on every ``/api/v2`` route: ``server/app.py``.)"""

from __future__ import annotations

from shoal.server.auth import Principal
from shoal.server.context import ApiError


def done(message: str) -> dict[str, str]:
    """OpenPAI's success answer for a change (its ``Response`` schema)."""
    return {"message": message}


def user_token_only(caller: Principal) -> None:
    """For routes whose description has no 403: an application token is not a credential for
    them (401), as it is one only for jobs."""
    if caller.kind != "user":
        raise ApiError(
            401,
            "UnauthorizedUserError",
            "application tokens may only operate on jobs; use a user token "
            "(POST /api/v2/authn/basic/login gives one)",
        )


# The texts OpenPAI's description gives its two ForbiddenUserError refusals (verbatim, its typo
# too); shoal's reason and fix go in ``problems``.
APPLICATIONS_REFUSED = "Applications are not allowed to do this operation."
NON_ADMIN_REFUSED = "Non-admin is not allow to do this operation."


def forbidden_application() -> ApiError:
    return ApiError(
        403,
        "ForbiddenUserError",
        APPLICATIONS_REFUSED,
        [
            {
                "path": "Authorization",
                "message": "an application token may only operate on jobs; use a user token "
                "(POST /api/v2/authn/basic/login gives one)",
            }
        ],
    )


def admin_only(caller: Principal) -> None:
    """For the routes only admins use: OpenPAI's 403 for an application token or a non-admin."""
    if caller.kind != "user":
        raise forbidden_application()
    if not caller.is_admin:
        raise ApiError(
            403,
            "ForbiddenUserError",
            NON_ADMIN_REFUSED,
            [{"path": "Authorization", "message": "only admins may do this; ask an admin"}],
        )
