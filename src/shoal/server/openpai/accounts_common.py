"""What the OpenPAI v2 account routers share: OpenPAI's 400 for bodies that do not validate, the
answer ``{message}``, and the refusal of application tokens."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from shoal.server.auth import Principal
from shoal.server.context import ApiError


class OpenPaiRoute(APIRoute):
    """A body that does not validate is OpenPAI's 400 ``InvalidParametersError`` (what its
    parameter middleware answers on every route with a body), not FastAPI's 422."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                problems: list[dict[str, object]] = [
                    {"path": ".".join(str(p) for p in e["loc"][1:]) or "body", "message": e["msg"]}
                    for e in exc.errors()
                ]
                message = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
                raise ApiError(400, "InvalidParametersError", message, problems) from None

        return route


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
