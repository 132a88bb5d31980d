"""Image archives built in the tests, as ``podman save`` writes them: docker-archive and
oci-archive tars of a one-layer image whose single file is ``salt`` (a salt of their own gives
each test an image ID nobody else has). ``podman load`` reads both."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def layer_and_config(salt: bytes) -> tuple[bytes, bytes]:
    layer = _tar([("salt", salt)])
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/salt"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{_sha(layer)}"]},
        },
        sort_keys=True,
    ).encode()
    return layer, config


def docker_archive(tags: tuple[str, ...] = ("localhost/t/app:1",), salt: bytes = b"x") -> bytes:
    """A docker-archive; its image ID is ``image_id_of(salt)``."""
    layer, config = layer_and_config(salt)
    manifest = [
        {"Config": f"{_sha(config)}.json", "RepoTags": list(tags), "Layers": [f"{_sha(layer)}.tar"]}
    ]
    return _tar(  # manifest.json last, as podman writes it
        [
            (f"{_sha(layer)}.tar", layer),
            (f"{_sha(config)}.json", config),
            ("manifest.json", json.dumps(manifest).encode()),
        ]
    )


def oci_archive(ref_name: str | None = "localhost/t/app:1", salt: bytes = b"x") -> bytes:
    layer, config = layer_and_config(salt)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": f"sha256:{_sha(config)}",
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": f"sha256:{_sha(layer)}",
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    descriptor: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{_sha(manifest)}",
        "size": len(manifest),
    }
    if ref_name is not None:
        descriptor["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    index = json.dumps({"schemaVersion": 2, "manifests": [descriptor]}).encode()
    return _tar(
        [
            (f"blobs/sha256/{_sha(config)}", config),
            (f"blobs/sha256/{_sha(layer)}", layer),
            (f"blobs/sha256/{_sha(manifest)}", manifest),
            ("index.json", index),
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
        ]
    )


def image_id_of(salt: bytes) -> str:
    return _sha(layer_and_config(salt)[1])


def sha256_of(data: bytes) -> str:
    return _sha(data)
