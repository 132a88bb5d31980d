"""OpenPAI's REST API v2 under ``/api/v2`` (docs/openpai-compat.md): OpenPAI's shapes, names and
error codes over shoal's services, checked against OpenPAI's own description by
``tests/server/openpai``. shoal's own API is ``/api/v1``.

OpenPAI's clients find its REST server at ``<host>/rest-server``: the same ``/api/v2`` is served
there too, with the ``/api/v1`` routes its VS Code client still calls (``rest_server.py``)."""

from __future__ import annotations

from fastapi import APIRouter

from shoal.server.openpai import (
    accounts,
    cluster,
    history,
    jobs,
    kubernetes,
    logurls,
    pending_starts,
    rest_server,
    ssh,
    tags,
)

API_V2 = (jobs, history, tags, cluster, kubernetes, accounts, ssh)

router = APIRouter()
for part in (*API_V2, logurls, rest_server, pending_starts):
    router.include_router(part.router)
for part in API_V2:  # <host>/rest-server/api/v2/..., not repeated in /openapi.json
    router.include_router(part.router, prefix=rest_server.PREFIX, include_in_schema=False)
