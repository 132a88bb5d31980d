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
