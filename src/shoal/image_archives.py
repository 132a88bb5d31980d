"""Container images as files: their names and the two archive formats ``shoal image push`` sends.

One module for the CLI (an archive's own name, a name's shape before anything is uploaded) and
the server (an upload is an image archive, and which image: its ID). Nothing here imports the
server, the store or pydantic.

- **Names** are ``NAME:TAG`` as Docker and podman write them (``localhost/team/trainer:v3``,
  ``registry:5000/x/y:1``); a name without a tag means ``:latest``. A digest (``NAME@sha256:``)
  names no pushed image: shoal has no registry to resolve it against.
- **Archives** are ``podman save --format docker-archive`` (``docker save``) or ``oci-archive``
  tars, uncompressed (podman 4.3's ``load`` reads no compressed archive), read in place with
  ``tarfile`` (its member index, then the few small JSON members it
  needs; layers are never read into memory). The image's ID is the sha256 of its config, as
  podman and Docker compute it, so an agent can check what ``podman load`` gave it.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TAG = "latest"
MAX_NAME = 255
MAX_JSON = 16 << 20  # a manifest, index or config bigger than this is not one
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
SAVE_HINT = (
    "make one with `podman save --format docker-archive -o IMAGE.tar NAME:TAG` (or "
    "`docker save`), or push straight from podman's store: `shoal image push NAME:TAG`"
)

# The grammar of github.com/distribution/reference: [domain[:port]/]component(/component)*[:tag]
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>[\w][\w.-]{{0,127}}))?$"
)


class ImageNameError(ValueError):
    """Not an image name; the message says why and what one looks like."""


class NotAnImage(ValueError):
    """The file is not an image archive shoal can use; the message names what is missing."""


def normalise_name(text: str) -> str:
    """``NAME:TAG``, with ``:latest`` added to a name without a tag."""
    name = text.strip()
    if "@" in name:
        raise ImageNameError(
            f"{text!r} names an image by digest; shoal has no registry to resolve it: name a "
            "pushed image by NAME:TAG (see `shoal image list`)"
        )
    found = _REFERENCE.match(name)
    if found is None or len(name) > MAX_NAME:
        raise ImageNameError(
            f"{text!r} is not an image name: use NAME:TAG, e.g. localhost/team/trainer:v3 "
            "(lower-case path components of letters, digits, '.', '_' or '-'; a tag of up to "
            "128 letters, digits, '_', '.' or '-'; at most 255 characters)"
        )
    return f"{found['name']}:{found['tag'] or DEFAULT_TAG}"


@dataclass(frozen=True, slots=True)
class ImageArchive:
    format: str  # docker-archive | oci-archive
    image_id: str  # the sha256 of the image's config, hex
    names: tuple[str, ...]  # the names the archive gives it (RepoTags; OCI ref names)


def read_archive(path: Path) -> ImageArchive:
    """What image ``path`` holds; ``NotAnImage`` naming what is missing if it holds none."""
    if _compressed(path):
        raise NotAnImage(
            "the archive is compressed, and podman load reads only plain tars here: push it "
            "uncompressed (gunzip it first)"
        )
    try:
        with tarfile.open(path, "r:") as archive:
            members = {_clean(m.name): m for m in archive.getmembers()}
            if "manifest.json" in members:
                return _docker(archive, members)
            if "index.json" in members:
                return _oci(archive, members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise NotAnImage(f"the file is not a tar archive ({exc}); {SAVE_HINT}") from None
    raise NotAnImage(
        "the archive has neither manifest.json (a docker-archive) nor index.json (an "
        f"oci-archive): it is not an image archive; {SAVE_HINT}"
    )


def _compressed(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(6)
    except OSError:
        return False
    return head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd"))


def _clean(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _read(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str) -> bytes:
    member = members.get(name)
    if member is None or not member.isfile():
        raise NotAnImage(f"the archive has no {name}: it is cut short or not an image archive")
    if member.size > MAX_JSON:
        raise NotAnImage(f"{name} is {member.size} bytes: too big for what it should hold")
    handle = archive.extractfile(member)
    assert handle is not None  # a regular file
    return handle.read()


def _json(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str) -> Any:
    try:
        return json.loads(_read(archive, members, name))
    except (ValueError, UnicodeDecodeError):
        raise NotAnImage(f"{name} in the archive is not JSON") from None


def _docker(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo]) -> ImageArchive:
    manifest = _json(archive, members, "manifest.json")
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        raise NotAnImage("manifest.json lists no image: it is not a docker-archive")
    if len(manifest) > 1:
        raise NotAnImage(
            f"the archive holds {len(manifest)} images; push one image per archive "
            "(`podman save --format docker-archive -o IMAGE.tar NAME:TAG`)"
        )
    entry = manifest[0]
    config = entry.get("Config")
    if not isinstance(config, str):
        raise NotAnImage("manifest.json names no Config: it is not a docker-archive")
    image_id = hashlib.sha256(_read(archive, members, _clean(config))).hexdigest()
    for layer in entry.get("Layers") or ():
        if not isinstance(layer, str) or _clean(layer) not in members:
            raise NotAnImage(f"the archive lacks layer {layer!r} that manifest.json lists")
    tags = entry.get("RepoTags") or ()
    return ImageArchive("docker-archive", image_id, tuple(t for t in tags if isinstance(t, str)))


def _oci(archive: tarfile.TarFile, members: dict[str, tarfile.TarInfo]) -> ImageArchive:
    index = _json(archive, members, "index.json")
    descriptor = _only_manifest(index, "index.json")
    names = _ref_names(descriptor)
    manifest = _json(archive, members, _blob(descriptor))
    if descriptor.get("mediaType") == OCI_INDEX or "manifests" in manifest:  # a nested index
        descriptor = _only_manifest(manifest, descriptor["digest"])
        names = names or _ref_names(descriptor)
        manifest = _json(archive, members, _blob(descriptor))
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if not isinstance(config, dict):
        raise NotAnImage(f"manifest {descriptor['digest']} names no config: not an image")
    body = _read(archive, members, _blob(config))
    image_id = hashlib.sha256(body).hexdigest()
    if f"sha256:{image_id}" != config.get("digest"):
        raise NotAnImage(f"the image config's sha256 is {image_id}, not {config.get('digest')}")
    for layer in manifest.get("layers") or ():
        name = _blob(layer)
        if name not in members:
            raise NotAnImage(f"the archive lacks layer {name} that the image's manifest lists")
    return ImageArchive("oci-archive", image_id, names)


def _only_manifest(index: Any, where: str) -> dict[str, Any]:
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or not manifests:
        raise NotAnImage(f"{where} lists no manifest: it is not an oci-archive")
    if len(manifests) > 1:
        raise NotAnImage(
            f"{where} lists {len(manifests)} manifests (several images or platforms); push one "
            "image per archive (`podman save --format oci-archive -o IMAGE.tar NAME:TAG`)"
        )
    descriptor = manifests[0]
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("digest"), str):
        raise NotAnImage(f"{where} has a manifest without a digest")
    return descriptor


def _blob(descriptor: Any) -> str:
    digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
    algorithm, _, value = str(digest).partition(":")
    if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise NotAnImage(f"digest {digest!r} is not a sha256 digest")
    return f"blobs/sha256/{value}"


def _ref_names(descriptor: dict[str, Any]) -> tuple[str, ...]:
    """The name podman gives an OCI manifest (a bare tag, as other tools write, is no name)."""
    annotations = descriptor.get("annotations") or {}
    name = annotations.get(OCI_REF_NAME) if isinstance(annotations, dict) else None
    return (name,) if isinstance(name, str) and ":" in name else ()
