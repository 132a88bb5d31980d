"""``shoal job release``: end the hold of a job's failed tasks kept for debugging
(docs/debug-jobs.md) before their time runs out; each then ends as its command did."""

from __future__ import annotations

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit
from shoal.cli.render import console


def register(job_app: typer.Typer) -> None:
    """Add ``release`` to ``shoal job``."""
    job_app.command("release")(release)


@api_errors
def release(
    job: str = typer.Argument(..., help="The job (id or name)."),
    task: str | None = typer.Option(
        None, "--task", help="ROLE/INDEX: only this task (default: every held task of the job)."
    ),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Free a job's tasks held for debugging now: their environment and resources are let go,
    and each ends FAILED with its command's exit code."""
    result = client().release(job, task)
    if emit(result, output):
        return
    for name in result["released"]:
        console.print(f"job {result['id']}: {name} released", markup=False)
