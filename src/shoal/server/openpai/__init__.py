"""OpenPAI's REST API v2 under ``/api/v2`` (docs/openpai-compat.md): OpenPAI's shapes, names and
error codes over shoal's services, checked against OpenPAI's own description by
``tests/server/openpai``. shoal's own API is ``/api/v1``."""

from __future__ import annotations

from fastapi import APIRouter

from shoal.server.openpai import accounts, cluster, history, jobs, kubernetes, logurls, ssh, tags

router = APIRouter()
for part in (jobs, history, tags, cluster, kubernetes, accounts, logurls, ssh):
    router.include_router(part.router)
