"""``/api/v1/images`` for :class:`shoal.client.ShoalClient` (a mixin: the SDK is one class)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

CHUNK = 1 << 20


class ImageCalls:
    """Push, list and remove container images (docs/containers.md, "Images")."""

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:  # ShoalClient's
        raise NotImplementedError

    def push_image(
        self,
        name: str,
        archive: Path,
        sha256: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Upload an image archive (``podman save``: docker-archive or oci-archive) as ``name``
        (NAME[:TAG]), streamed from the file; ``progress`` is told each chunk's size."""
        params = {"sha256": sha256} if sha256 else {}
        result: dict[str, Any] = self._call(
            "PUT",
            f"/api/v1/images/{quote(name, safe='/:')}",
            params=params,
            content=_chunks(archive, progress),
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Length": str(archive.stat().st_size),
            },
        )
        return result

    def images(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/images")
        return result

    def remove_image(self, name: str) -> dict[str, Any]:
        """Remove an image; the answer names the queued jobs that now wait for it again."""
        result: dict[str, Any] = self._call("DELETE", f"/api/v1/images/{quote(name, safe='/:')}")
        return result


def _chunks(path: Path, progress: Callable[[int], None] | None) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            if progress is not None:
                progress(len(chunk))
            yield chunk
