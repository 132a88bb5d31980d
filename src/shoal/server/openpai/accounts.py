"""OpenPAI v2 accounts (docs/openpai-compat.md): tokens, authentication, users and groups."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v2", tags=["openpai"])
