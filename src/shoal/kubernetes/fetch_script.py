"""The init container that brings a task's code and data into its Pod (docs/kubernetes.md,
"Code and data"): Python's standard library only, run as ``python3 -c`` in the task's image (or
the agent's ``--helper-image``).

It downloads from the shoal server with the attempt's own credential (``SHOAL_FETCH_TOKEN``,
from the attempt's Secret), checks each blob's sha256 against the one in the launch order,
unpacks the code archive into the working directory and puts each data set at
``$SHOAL_DATA_DIR/<ref>`` (a file, or a directory unpacked from its tar). Anything wrong ends it
with a non-zero code and one line in ``/dev/termination-log``, which the agent reports as the
attempt's launch error.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request

CHUNK = 1 << 20


class Failed(Exception):
    pass


def download(url: str, token: str, context: ssl.SSLContext | None, sha256: str, to: str) -> None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    digest = hashlib.sha256()
    try:
        opened = urllib.request.urlopen(request, timeout=60, context=context)
        with opened as answer, open(to, "wb") as out:
            while chunk := answer.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        said = exc.read().decode(errors="replace")[:300]
        raise Failed(f"{url}: the server answered {exc.code}: {said}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Failed(f"{url}: cannot reach the shoal server: {exc}") from None
    if digest.hexdigest() != sha256:
        raise Failed(f"{url}: sha256 {digest.hexdigest()} is not the {sha256} ordered")


def unpack(archive: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(target, filter="data")
                return
            root = os.path.realpath(target)
            for member in tar.getmembers():
                where = os.path.realpath(os.path.join(target, member.name))
                if not (where == root or where.startswith(root + os.sep)):
                    raise Failed(f"the archive's {member.name!r} is outside its directory")
                if member.issym() or member.islnk() or member.isdev():
                    raise Failed(f"the archive's {member.name!r} is a link or a device")
            tar.extractall(target)
    except (tarfile.TarError, EOFError) as exc:
        raise Failed(f"cannot unpack: {exc}") from None


def fetch() -> None:
    server = os.environ["SHOAL_FETCH_SERVER"].rstrip("/")
    attempt = os.environ["SHOAL_FETCH_ATTEMPT"]
    token = os.environ["SHOAL_FETCH_TOKEN"]
    workdir = os.environ["SHOAL_WORKDIR"]
    ca = os.environ.get("SHOAL_FETCH_CA")
    context = ssl.create_default_context(cadata=ca) if ca else None
    scratch = tempfile.mkdtemp(prefix=".shoal-fetch-", dir=workdir)
    code = os.environ.get("SHOAL_FETCH_CODE")
    if code:
        archive = os.path.join(scratch, "code.tar.gz")
        download(f"{server}/api/v1/attempts/{attempt}/code", token, context, code, archive)
        unpack(archive, workdir)
        os.unlink(archive)
        print("shoal fetch: code unpacked", flush=True)
    for mount in json.loads(os.environ.get("SHOAL_FETCH_DATA") or "[]"):
        blob = os.path.join(scratch, mount["sha256"])
        url = f"{server}/api/v1/attempts/{attempt}/data/{mount['sha256']}"
        download(url, token, context, mount["sha256"], blob)
        place = os.path.join(os.environ["SHOAL_DATA_DIR"], mount["ref"])
        os.makedirs(os.path.dirname(place), exist_ok=True)
        if mount["kind"] == "dir":
            unpack(blob, place)
            os.unlink(blob)
        else:
            os.replace(blob, place)
        print(f"shoal fetch: data set {mount['ref']}", flush=True)
    os.rmdir(scratch)


def main() -> int:
    try:
        fetch()
    except Failed as exc:
        said = f"fetching the task's code and data failed: {exc}"
        print(said, file=sys.stderr, flush=True)
        try:
            with open("/dev/termination-log", "w") as log:
                log.write(said[:4000])
        except OSError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
