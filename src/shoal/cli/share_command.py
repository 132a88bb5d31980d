"""``shoal job share``: let other users and groups reach a job's tasks' ports through the task
proxy and `shoal job port-forward` (docs/proxy.md, "Sharing a job's ports"). Nothing else of the
job is shared: its details, logs, exec and stop stay its owner's and admins'."""

from __future__ import annotations

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit
from shoal.cli.render import console


def register(job_app: typer.Typer) -> None:
    job_app.command("share")(share)


@api_errors
def share(
    job: str = typer.Argument(..., help="The job (id or name)."),
    users: list[str] = typer.Option([], "--user", "-u", help="A user to share with (repeat)."),
    groups: list[str] = typer.Option([], "--group", "-g", help="A group to share with (repeat)."),
    remove: bool = typer.Option(False, "--remove", help="Stop sharing with these instead."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Share a job's tasks' ports (its notebook, its TensorBoard) with users and groups; with no
    --user or --group, show who it is shared with.

    shoal job share nb --user bob; shoal job share nb --group ml --remove."""
    sdk = client()
    current = sdk.job_shares(job)
    if users or groups:
        if remove:
            wanted_users = [u for u in current["users"] if u not in users]
            wanted_groups = [g for g in current["groups"] if g not in groups]
        else:
            wanted_users = sorted({*current["users"], *users})
            wanted_groups = sorted({*current["groups"], *groups})
        current = sdk.set_job_shares(current["id"], wanted_users, wanted_groups)
    if emit(current, output):
        return
    who = [*(f"user {u}" for u in current["users"]), *(f"group {g}" for g in current["groups"])]
    if who:
        console.print(f"job {current['id']}'s ports are shared with {', '.join(who)}", markup=False)
    else:
        console.print(
            f"job {current['id']}'s ports are not shared (only its owner and admins reach them)",
            markup=False,
        )
