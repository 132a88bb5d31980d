"""An image of shoal for the deployment test, built offline: the local Debian python image plus
shoal and the distributions ``shoal[kubernetes]`` needs at run time, copied from this virtualenv
(the same files ``pip install`` put there; the wheels are manylinux builds for CPython 3.11, which
the image's Debian Python 3.11 runs). deploy/kubernetes/Containerfile is the way users build it
from PyPI; this one is what a machine without a registry can build."""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

IMAGE = "localhost/shoal-test/shoal:test"
BASE = "localhost/shoal-test/python:bookworm"
SOURCE = Path(__file__).resolve().parents[2] / "src" / "shoal"


def _closure(root: str, extras: tuple[str, ...]) -> list[metadata.Distribution]:
    """The distributions ``root[extras]`` needs at run time, with their own needs."""
    wanted: dict[str, metadata.Distribution] = {}
    todo = [(root, extras)]
    while todo:
        name, with_extras = todo.pop()
        key = name.lower().replace("_", "-")
        if key in wanted:
            continue
        dist = metadata.distribution(name)
        wanted[key] = dist
        for line in dist.requires or ():
            requirement = Requirement(line)
            environments = [{"extra": e} for e in with_extras] or [{"extra": ""}]
            marker = requirement.marker
            if marker is None or any(marker.evaluate(env) for env in environments):
                todo.append((requirement.name, tuple(requirement.extras)))
    return [d for k, d in wanted.items() if k != root]


def stage(into: Path) -> Path:
    """The site directory: shoal's source and its run-time distributions' files."""
    site = into / "site"
    site.mkdir(parents=True)
    for dist in _closure("shoal", ("kubernetes",)):
        for file in dist.files or ():
            source = Path(str(dist.locate_file(file)))
            if not source.is_file() or "__pycache__" in file.parts or file.parts[0] == "..":
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    shutil.copytree(SOURCE, site / "shoal", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def build(scratch: Path) -> str:
    """Build the image (a few seconds; podman runs from ``scratch``)."""
    stage(scratch)
    (scratch / "Containerfile").write_text(
        f"FROM {BASE}\n"
        "COPY site /opt/shoal\n"
        "ENV PYTHONPATH=/opt/shoal\n"
        "RUN printf '#!/bin/sh\\nexec python3 -m shoal \"$@\"\\n' > /usr/local/bin/shoal "
        "&& chmod 755 /usr/local/bin/shoal && shoal --help >/dev/null\n"
    )
    subprocess.run(
        ["podman", "build", "--pull=never", "-q", "-t", IMAGE, str(scratch)],
        check=True,
        capture_output=True,
        cwd=scratch,
    )
    return IMAGE
