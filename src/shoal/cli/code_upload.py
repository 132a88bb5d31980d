"""The job's code directory on its way to the server: built into a deterministic .tar.gz
(``.shoalignore`` and the default skips honoured: see ``shoal.archives``), named by its sha256,
and uploaded only if the server does not have it yet (streamed from a temporary file)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.cli.common import fail
from shoal.cli.render import err_console
from shoal.client import ShoalClient

if TYPE_CHECKING:  # tarfile and pathspec load only when a code directory is archived
    from shoal.archives import BuiltArchive

MAX_ARCHIVE = 100 * 1024 * 1024  # the compressed archive; the server's default limit too


def build_code_archive(directory: Path, out: Path, limit: int = MAX_ARCHIVE) -> BuiltArchive:
    """The code directory as a .tar.gz at ``out``; a clear error if it is over ``limit``."""
    from shoal.archives import IGNORE_FILE, ArchiveError, build, human

    if not directory.is_dir():
        raise fail(f"code directory {directory} does not exist")
    try:
        built = build(directory, out, compress=True)
    except ArchiveError as exc:
        raise fail(f"code directory {directory}: {exc}") from None
    if built.size > limit:
        biggest = ", ".join(f"{name} ({human(size)})" for size, name in built.biggest)
        raise fail(
            f"code directory {directory} is {human(built.size)} compressed, over the limit of "
            f"{human(limit)}. Its biggest files: {biggest}. List what the job does not need in "
            f"{directory / IGNORE_FILE} (gitignore syntax), and push data sets with "
            "`shoal data push`"
        )
    return built


def upload_code(api: ShoalClient, directory: Path, quiet: bool = False) -> str:
    """Make sure the server has the code of ``directory``; returns its sha256."""
    from shoal.archives import human

    with tempfile.TemporaryDirectory(prefix="shoal-code-") as scratch:
        built = build_code_archive(directory, Path(scratch) / "code.tar.gz")
        if api.has_code(built.sha256):
            note = f"code: {directory} unchanged, already on the server"
        else:
            api.upload_code(built.sha256, built.path)
            note = f"code: uploaded {directory} ({built.files} files, {human(built.size)})"
    if not quiet:
        err_console.print(f"{note} (sha256 {built.sha256[:12]})", markup=False, highlight=False)
    return built.sha256
