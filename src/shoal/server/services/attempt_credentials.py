"""Per-attempt credentials: what a Kubernetes Pod's init container shows to fetch its attempt's
code archive and data sets (docs/kubernetes.md, "Code and data").

A credential names one attempt and carries an HMAC of its id under a key kept in the server's
home (``attempt-fetch.key``, mode 0600, made on first use). It opens only
``/api/v1/attempts/{id}/code`` and ``/data/{sha256}`` of that attempt, and only while the attempt
is unfinished: attempt ids are never reused, so a credential dies with its attempt and needs no
store of its own. It is minted into the launch orders of the Kubernetes agent alone, which keeps
it in the attempt's Secret (never in the Pod spec).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from shoal.protocol import LaunchOrder
from shoal.server.auth import write_secret_file
from shoal.server.context import ApiError, ServerContext

KEY_FILE = "attempt-fetch.key"
PREFIX = "shoal_attempt_"
_SHAPE = re.compile(rf"{PREFIX}(\d+\.\d+)_([0-9a-f]{{64}})")


@functools.lru_cache(maxsize=4)
def _key(path: Path) -> bytes:
    """The key in ``path``, made whole or not at all: written aside, then linked into place (a
    second maker's link fails and both read the first one's key)."""
    if not path.is_file():
        aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        write_secret_file(aside, secrets.token_hex(32))
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            aside.unlink()
    return bytes.fromhex(path.read_text().strip())


def _digest(ctx: ServerContext, attempt_id: str) -> str:
    key = _key(ctx.settings.home / KEY_FILE)
    return hmac.new(key, attempt_id.encode(), hashlib.sha256).hexdigest()


def mint(ctx: ServerContext, attempt_id: str) -> str:
    return f"{PREFIX}{attempt_id}_{_digest(ctx, attempt_id)}"


def check(ctx: ServerContext, credential: str | None, attempt_id: str) -> None:
    """Refuse (401) a credential that is not one this server minted for ``attempt_id``."""
    found = _SHAPE.fullmatch(credential or "")
    if found is None or found.group(1) != attempt_id:
        raise ApiError(
            401,
            "UnauthorizedAttemptError",
            f"a credential of attempt {attempt_id} is required (its Pod's Secret holds it)",
        )
    if not hmac.compare_digest(found.group(2), _digest(ctx, attempt_id)):
        raise ApiError(401, "UnauthorizedAttemptError", "the attempt's credential is not valid")


def with_credentials(ctx: ServerContext, orders: list[LaunchOrder]) -> list[LaunchOrder]:
    """The orders, those that bring code or data with the credential to fetch them."""
    return [
        order.model_copy(update={"fetch_token": mint(ctx, order.attempt_id)})
        if order.has_code or order.data
        else order
        for order in orders
    ]
