"""The refusals each route answers, written into the OpenAPI document.

FastAPI documents a route's success and its 422 only, and the 422 with a body shoal never sends.
Every "no" shoal gives has one shape (``ErrorBody``: a code, a message, the problems); this module
adds the statuses each operation answers with that body, so clients and schemathesis
(tests/fuzz/test_api_fuzz.py, which finds any status a route answers but does not document) read
the truth. OpenPAI's routes answer a body that does not validate with 400, not 422.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from shoal.server.schemas import ErrorBody

DESCRIPTIONS = {
    400: "Invalid request: the message and problems name the field and the fix",
    401: "No token, or an unknown, revoked or expired one",
    403: "Not allowed for this caller",
    404: "No such thing, or not one the caller may see",
    409: "Conflicts with the current state",
    422: "Invalid parameters: the problems name each field",
    413: "The body is over its size limit (docs/limits.md): the message names the setting",
    426: "The agent speaks another protocol version: upgrade it",
    429: "Over the caller's rate limit (docs/limits.md): retry after Retry-After seconds",
    500: "OpenPAI's own answer for this case (its contract describes no other)",
    507: "The disk under the server's home is full (docs/disk.md): nothing was written",
}

# Routes anyone may call (tests/server/test_api.py proves every other one answers 401).
PUBLIC = {
    "GET /api/v1/health",
    "GET /api/v1/version",
    "POST /api/v2/authn/basic/login",
    "GET /api/v2/info",
    "GET /log-manager/{job_id}/{job_attempt}/{role}/{index}/{task_attempt}/{stream}",
    "GET /api/v2/authn/oidc/login",
    "GET /api/v2/authn/oidc/logout",
    "GET /api/v1/join/ca",
    "POST /api/v1/join",
    "GET /api/v1/install/{file}",  # the packages cloud machines install (docs/cloud.md)
    "POST /api/v1/session",
    "GET /api/v1/session",
}

_AGENT = (400, 403, 426)
_JOB = (403, 404)  # 403: another user's job (services/jobs.find_job)
_PAI_JOB = (400, 404)
_ADMIN_ON_NAME = (400, 403, 404)
# What each operation refuses beyond 401 and its validation status, found by reading the routes
# and by the fuzzer.
REFUSALS: dict[str, tuple[int, ...]] = {
    "GET /api/v1/install/{file}": (404,),
    "GET /api/v1/agent/attempts/{attempt_id}/code": (*_AGENT, 404),
    "GET /api/v1/agent/certificate": (*_AGENT, 409),
    "POST /api/v1/agent/certificate": (*_AGENT, 409),
    "GET /api/v1/agent/attempts/{attempt_id}/data/{sha256}": (*_AGENT, 404),
    "GET /api/v1/agent/attempts/{attempt_id}/image/{sha256}": (*_AGENT, 404),
    "GET /api/v1/agent/code/{job_id}": (*_AGENT, 404),
    "POST /api/v1/agent/logs": (*_AGENT, 404, 409),
    "POST /api/v1/agent/orders": (*_AGENT, 404, 409),
    "POST /api/v1/agent/report": (*_AGENT, 404, 409),
    "GET /api/v1/code/{sha256}": (400, 404),
    "PUT /api/v1/code/{sha256}": (400,),
    "GET /api/v1/data": (400,),
    "DELETE /api/v1/data/{owner}/{name}": (400, 403, 404, 409),
    "GET /api/v1/data/{owner}/{name}": (400, 404),
    "PUT /api/v1/data/{owner}/{name}": (400, 403, 404, 409),
    "GET /api/v1/data/{owner}/{name}/content": (400, 404),
    "POST /api/v1/data/{owner}/{name}/share": (400, 403, 404),
    "POST /api/v1/data/{owner}/{name}/unshare": (400, 403, 404),
    "GET /api/v1/exec-sessions": (400, 403),
    "GET /api/v1/audit": (403,),
    "GET /api/v1/admin/backup": (403,),
    "GET /api/v1/admin/ca": (403, 409),
    "POST /api/v1/admin/ca/finish": (403, 409),
    "POST /api/v1/admin/ca/rotate": (403, 409),
    "DELETE /api/v1/images/{name}": (400, 403, 404, 409),
    # a name with a newline matches no route (the path convertor stops at it): Starlette's 404
    "PUT /api/v1/images/{name}": (400, 403, 404, 409),
    "GET /api/v1/jobs": (400, 403),
    "POST /api/v1/jobs": (400, 403, 404, 409),
    "POST /api/v1/jobs/check": (400, 403, 404),
    "POST /api/v1/jobs/plan": (400, 403, 404),
    "GET /api/v1/jobs/{job}": _JOB,
    "GET /api/v1/jobs/{job}/events": _JOB,
    "GET /api/v1/jobs/{job}/logs": (400, *_JOB),
    "GET /api/v1/jobs/{job}/logs/download": (400, *_JOB),
    "GET /api/v1/jobs/{job}/logs/lines": (400, *_JOB),
    "GET /api/v1/jobs/{job}/pending-reason": _JOB,
    "GET /api/v1/jobs/{job}/source": _JOB,
    "POST /api/v1/jobs/{job}/stop": (403, 404, 409),
    "POST /api/v1/jobs/{job}/release": (400, 403, 404, 409),  # 409: nothing held
    "GET /api/v1/jobs/{job}/shares": _JOB,
    "PUT /api/v1/jobs/{job}/shares": _JOB,  # unknown users and groups: the validation status
    "GET /api/v1/pools": (409,),  # a server without a cloud file (docs/cloud.md)
    "PUT /api/v1/pools/{name}/target": (400, 403, 404, 409),  # above max; admins; no pool
    "GET /api/v1/jobs/{job}/ssh": (*_JOB, 409),  # 409: no ssh plugin, not placed
    "GET /api/v1/jobs/{job}/ssh/private-key": (*_JOB, 409),
    "GET /api/v1/ssh-keys": (400, 403, 404),  # ?user= another's: admins only; no such user
    "POST /api/v1/ssh-keys": (400, 403, 404, 409),  # 409: that key or name again
    "DELETE /api/v1/ssh-keys/{name}": (400, 403, 404),
    "POST /api/v1/join": (400, 401, 403, 409, 426),
    "GET /api/v1/join-tokens": (403, 409),
    "POST /api/v1/join-tokens": (400, 403, 409),
    "DELETE /api/v1/join-tokens/{token_id}": (403, 404, 409),
    "GET /api/v1/join/ca": (409,),
    "GET /api/v1/metrics/cluster": (400,),
    "DELETE /api/v1/nodes/{name}": (403, 404, 409),
    "POST /api/v1/nodes/{name}/cordon": (403, 404, 409),
    "POST /api/v1/nodes/{name}/drain": (403, 404, 409),
    "GET /api/v1/nodes/{name}/events": (404,),
    "GET /api/v1/nodes/{name}/metrics": (400, 404),
    "GET /api/v1/nodes/{name}/tasks": (404,),
    "POST /api/v1/nodes/{name}/uncordon": (403, 404, 409),
    "POST /api/v1/session": (400, 401, 403),
    "DELETE /api/v1/session": (403,),
    "POST /api/v1/tokens": (400, 403),
    "DELETE /api/v1/tokens/{token_id}": (403, 404),
    "GET /api/v1/usage": (400, 403),
    "GET /api/v1/users": (403,),
    "POST /api/v1/users": (400, 403, 409),
    "DELETE /api/v1/users/{name}": (*_ADMIN_ON_NAME, 409),
    "PATCH /api/v1/users/{name}": (*_ADMIN_ON_NAME, 409),
    "DELETE /api/v1/virtual-clusters/{name}": (*_ADMIN_ON_NAME, 409),
    "GET /api/v1/virtual-clusters/{name}": (404,),
    "PATCH /api/v1/virtual-clusters/{name}": (*_ADMIN_ON_NAME, 409),
    "POST /api/v1/virtual-clusters/{name}": (400, 403, 409),
    "PUT /api/v1/virtual-clusters/{name}": (*_ADMIN_ON_NAME, 409),
    "POST /api/v2/authn/basic/login": (400, 401),
    "DELETE /api/v2/authn/basic/logout": (400,),
    "GET /api/v2/groups": (403,),
    "POST /api/v2/groups": (400, 403),
    "PUT /api/v2/groups": (400, 403, 404),
    # OpenPAI's contract describes 500 NoGroupError for an unknown group and no 404
    # (docs/openpai-compat.md, "Answers the description decides")
    "DELETE /api/v2/groups/{group}": (400, 403, 500),
    "GET /api/v2/groups/{group}": (403, 404),
    "GET /api/v2/groups/{group}/userlist": (403, 404),
    "GET /api/v2/jobs": (400, 403),
    "POST /api/v2/jobs": (400, 403, 404, 409),
    "GET /api/v2/jobs/{framework}": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/attempts/{attempt}": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts": (
        _PAI_JOB
    ),
    "GET /api/v2/jobs/{framework}/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts/"
    "{task_attempt}/logs": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/config": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/events": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/ssh": (400, 403, 404),
    "PUT /api/v2/jobs/{framework}/executionType": (400, 403, 404),
    "GET /api/v2/jobs/{framework}/job-attempts": _PAI_JOB,
    "GET /api/v2/jobs/{framework}/job-attempts/{attempt}": _PAI_JOB,
    "DELETE /api/v2/jobs/{framework}/tag": (400, 403, 404),
    "PUT /api/v2/jobs/{framework}/tag": (400, 403, 404),
    "GET /api/v2/kubernetes/pods": (400,),
    "GET /api/v2/storages": (400,),
    "GET /api/v2/storages/{storage}": (400, 404),
    "POST /api/v2/tokens/application": (400, 401, 403),
    "GET /api/v2/tokens": (401,),
    "DELETE /api/v2/tokens/{token}": (400, 403, 404),
    "GET /api/v2/users": (403,),
    "POST /api/v2/users": (400, 403),
    "PUT /api/v2/users": (400, 403, 404),
    "PUT /api/v2/users/me": (400, 403),
    "DELETE /api/v2/users/{user}": (400, 403, 404),
    "GET /api/v2/users/{user}": (400, 404),
    "DELETE /api/v2/users/{user}/group/": (400, 403, 404),
    "PUT /api/v2/users/{user}/group/": (400, 403, 404),
    "PUT /api/v2/users/{user}/grouplist/": (400, 403, 404),
    "GET /api/v2/virtual-clusters/{name}": (400, 404),
    "GET /api/v2/virtual-clusters/{name}/sku-types": (400, 404),
    "GET /log-manager/{job_id}/{job_attempt}/{role}/{index}/{task_attempt}/{stream}": (403, 404),
}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` document each operation's refusals (built once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            document_refusals(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def document_refusals(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorBody"] = ErrorBody.model_json_schema()
    for key in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body: never sent
        components.pop(key, None)
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            _document(f"{method.upper()} {path}", operation)


def _document(label: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    validation = responses.pop("422", None)
    statuses = set(REFUSALS.get(label, ()))
    if label not in PUBLIC:
        statuses.add(401)
    statuses.add(429)  # every caller but admins and agents is rate-limited (docs/limits.md)
    if "requestBody" in operation:
        statuses.add(413)
    if label.split(" ", 1)[0] in ("POST", "PUT", "PATCH", "DELETE"):
        statuses.add(507)  # a write that met a full disk (docs/disk.md)
    if validation is not None:
        statuses.add(400 if label.split(" ", 1)[1].startswith("/api/v2/") else 422)
    for status in sorted(statuses):
        responses.setdefault(
            str(status),
            {
                "description": DESCRIPTIONS[status],
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
                },
            },
        )
