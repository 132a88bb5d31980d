"""What a cloud machine installs shoal from (``install: wheelhouse``, docs/cloud.md): shoal's
wheel and the wheelhouse of its runtime dependencies, served read-only and without a token (they
are public packages). ``MANIFEST`` lists every file with its sha256; the bootstrap fetches the
manifest over HTTPS verifying the cluster's CA, then each file, and checks each against it.

The payload is built once, on the first request, into ``<home>/install`` (from the checkout the
server runs from, or the wheelhouse's own shoal wheel: ``shoal.bootstrap.wheels``). Only names the
payload holds are served, never a path taken from the request.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, PlainTextResponse, Response

from shoal.bootstrap.wheels import WheelError, build_payload, default_wheelhouse
from shoal.server.context import ApiError
from shoal.server.deps import Context

router = APIRouter(tags=["install"])
MANIFEST = "MANIFEST"  # shoal.cloud.bootstrap fetches this name first


@dataclass(frozen=True)
class Served:
    files: dict[str, Path]  # file name -> where it is
    manifest: str  # "sha256  name" per line


_built: dict[Path, Served] = {}
_building = threading.Lock()


def served_payload(home: Path) -> Served:
    """The payload of the server at ``home``: built on first use, then kept for the process."""
    with _building:
        found = _built.get(home)
        if found is not None:
            return found
        try:
            payload = build_payload(default_wheelhouse(), home / "install")
        except WheelError as exc:
            raise ApiError(
                404,
                "NoWheelhouse",
                f"this server has no wheelhouse to serve: {exc}; or give the pool "
                "`install: preinstalled` or `install: pinned`",
            ) from None
        files = {path.name: path for path in payload.files}
        lines = [f"{_sha256(path)}  {name}" for name, path in sorted(files.items())]
        found = Served(files, "\n".join(lines) + "\n")
        _built[home] = found
        return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@router.get(
    "/api/v1/install/{file}",
    response_class=Response,
    responses={
        200: {
            "description": "The file (a wheel), or the manifest as text",
            "content": {"application/octet-stream": {}, "text/plain": {}},
        }
    },
)
def install_file(file: str, ctx: Context) -> Response:
    """A file of the wheelhouse cloud machines install shoal from (``MANIFEST``: the list,
    with each file's sha256). Public: these are the packages anyone may download."""
    served = served_payload(ctx.settings.home)
    if file == MANIFEST:
        return PlainTextResponse(served.manifest)
    path = served.files.get(file)
    if path is None:
        raise ApiError(
            404,
            "NoSuchInstallFile",
            f"the wheelhouse holds no file {file!r}; `{MANIFEST}` lists the files it holds",
        )
    return FileResponse(path, media_type="application/octet-stream", filename=file)
