"""``shoal image push|list|rm``: container images pushed to the cluster; no registry is involved.

``push`` takes an image of this machine's podman store (``podman save``d to a temporary archive
first) or an archive file (``podman save`` / ``docker save``: docker-archive or oci-archive). The
archive is read here before anything is sent, so a file that holds no image, or no name, is
refused at once; the upload is streamed from the file and checked against its sha256.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console, err_console

image_app = typer.Typer(
    help="Container images: push them to the cluster (no registry needed); container jobs run "
    "them by NAME:TAG.",
    no_args_is_help=True,
)
PROGRESS_FROM = 8 << 20  # bytes: smaller uploads need no progress bar
SAVE_TIMEOUT_S = 3600
_COLUMNS = [Column("IMAGE"), Column("IMAGE ID"), Column("SIZE", right=True)]
_COLUMNS += [Column("PUSHED BY", drop=2), Column("PUSHED", drop=1)]


@image_app.command("push")
@api_errors
def push(
    image: str = typer.Argument(
        ...,
        help="An image of this machine's podman store (NAME[:TAG]), or an archive file "
        "(podman save / docker save: docker-archive or oci-archive).",
    ),
    name: str | None = typer.Option(
        None,
        "--name",
        help="The name jobs use (NAME[:TAG]; no tag: latest). Default: IMAGE, or the name the "
        "archive gives its image.",
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Push an image to the cluster; agents load it when a container task first needs it."""
    from shoal.archives import human
    from shoal.image_archives import ImageNameError, normalise_name

    with tempfile.TemporaryDirectory(prefix="shoal-image-") as scratch:
        given = Path(image)
        if given.exists():
            archive, target = given, _archive_name(given, name)
        else:
            archive, target = _podman_save(image, Path(scratch)), name or image
        try:
            target = normalise_name(target)
        except ImageNameError as exc:
            raise fail(str(exc)) from None
        sha256 = _sha256(archive)
        pushed = _upload(target, archive, sha256)
    if emit(pushed, output):
        return
    console.print(
        f"pushed {pushed['name']}: image {pushed['imageId'][:12]}, {human(pushed['size'])}"
        + (f" (it was image {pushed['replaced'][:12]})" if pushed.get("replaced") else ""),
        markup=False,
    )
    released = pushed.get("releasedJobs") or []
    if released:
        console.print(f"queued {_jobs(released)} that waited for it", markup=False)


def _archive_name(path: Path, name: str | None) -> str:
    """``name``, else the one name the archive gives its image. The archive is read here: a file
    that holds no image is refused before anything is sent."""
    from shoal.image_archives import NotAnImage, read_archive

    if path.is_dir():
        raise fail(f"{path} is a directory: push an image archive file or an image name")
    try:
        found = read_archive(path)
    except NotAnImage as exc:
        raise fail(f"{path}: {exc}") from None
    if name is not None or len(found.names) == 1:
        return name or found.names[0]
    if not found.names:
        raise fail(f"{path} gives its image no name: say which with --name NAME:TAG")
    raise fail(
        f"{path} names its image {len(found.names)} ways ({', '.join(found.names)}): choose one "
        "with --name"
    )


def _podman_save(image: str, scratch: Path) -> Path:
    """``image`` of the local podman store as a docker-archive under ``scratch`` (podman runs
    there: conmon leaves an ``oom`` file in its working directory)."""
    podman = shutil.which("podman")
    if podman is None:
        raise fail(
            f"no file {image}, and podman is not installed here to read an image of that name "
            "from: push an archive (`docker save -o IMAGE.tar IMAGE`, then `shoal image push "
            "IMAGE.tar --name NAME:TAG`), or install podman (scripts/containers-setup.sh)"
        )
    found = _run([podman, "image", "exists", image], scratch)
    if found.returncode == 1:
        raise fail(
            f"no file {image}, and no image {image} in podman's store here (`podman images` "
            "lists them)"
        )
    if found.returncode != 0:
        raise fail(f"podman could not look for {image}: {found.stderr.strip()[-500:]}")
    archive = scratch / "image.tar"
    command = [podman, "save", "--format", "docker-archive", "--output", str(archive), image]
    if console.is_terminal:
        with err_console.status(f"saving {image} from podman's store"):
            saved = _run(command, scratch)
    else:
        saved = _run(command, scratch)
    if saved.returncode != 0:
        said = saved.stderr.strip()[-500:] or f"exit status {saved.returncode}"
        raise fail(f"podman could not save {image}: {said}")
    return archive


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=SAVE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise fail(f"{' '.join(command[:3])} failed: {exc}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _upload(name: str, archive: Path, sha256: str) -> dict[str, Any]:
    api = client()
    size = archive.stat().st_size
    if not (console.is_terminal and size >= PROGRESS_FROM):
        return api.push_image(name, archive, sha256)
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(f"pushing {name}", total=size)
        return api.push_image(name, archive, sha256, lambda n: bar.advance(task, n))


def _jobs(ids: list[str]) -> str:
    shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return f"job{'s' if len(ids) > 1 else ''} {shown}"


@image_app.command("list")
@api_errors
def list_images(output: OutputFormat = OUTPUT_OPTION) -> None:
    """The images pushed to the cluster."""
    from shoal.archives import human

    rows = client().images()
    if emit(rows, output):
        return
    if not rows:
        console.print("no images; push one with `shoal image push NAME:TAG` (or an archive file)")
        return
    cells = [
        [
            row["name"],
            row["imageId"][:12],
            human(row["size"]),
            row["pushedBy"],
            datetime.fromtimestamp(row["pushedAt"]).strftime("%Y-%m-%d %H:%M"),
        ]
        for row in rows
    ]
    width = None if output is OutputFormat.WIDE else terminal_width()
    typer.echo(table_text(_COLUMNS, cells, width))


@image_app.command("rm")
@api_errors
def remove(name: str = typer.Argument(..., help="NAME[:TAG] (no tag: latest).")) -> None:
    """Remove an image (yours, or any as an admin). Queued jobs that need it wait for it again;
    running tasks keep theirs."""
    removed = client().remove_image(name)
    console.print(f"removed image {removed['name']}", markup=False)
    held = removed.get("heldJobs") or []
    if held:
        console.print(
            f"{_jobs(held)} that need it wait until it is pushed again (ImageNotFound)",
            markup=False,
        )
