"""``shoal vc create|update|list|delete``: virtual clusters, changed live."""

from __future__ import annotations

from typing import Any

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit
from shoal.cli.render import console, new_table
from shoal.cli.vc_update import (
    describe_amounts,
    parse_aging,
    parse_idle_timeout,
    parse_resources,
    update_command,
)
from shoal.spec.units import format_duration

vc_app = typer.Typer(help="Virtual clusters: teams' guaranteed shares.", no_args_is_help=True)


def _settings(
    guarantee: str | None,
    borrow: str | None,
    members: str | None,
    user_gpu_cap: int | None,
    preempt_within: bool,
    strict_fifo: bool,
    aging: str | None,
    aging_max_preemptions: int | None,
    description: str,
    idle_timeout: str | None = None,
) -> dict[str, Any]:
    g = parse_resources(guarantee, "--guarantee") or {}
    b = parse_resources(borrow, "--borrow-limit")
    return {
        "description": description,
        "guarantee_cpu": g.get("cpu"),
        "guarantee_memory_mib": None if "memory_mib" not in g else int(g["memory_mib"]),
        "guarantee_gpu": int(g.get("gpu", 0)),
        "guarantee_gpu_by_type": {k[4:]: int(v) for k, v in g.items() if k.startswith("gpu.")},
        "borrow_cpu": None if b is None else b.get("cpu"),
        "borrow_memory_mib": None if b is None or "memory_mib" not in b else int(b["memory_mib"]),
        "borrow_gpu": None if b is None or "gpu" not in b else int(b["gpu"]),
        "user_gpu_cap": user_gpu_cap,
        "preempt_within": preempt_within,
        "strict_fifo": strict_fifo,
        "aging": parse_aging(aging, aging_max_preemptions),
        "members": _names(members),
        "idle_timeout_s": parse_idle_timeout(idle_timeout),
    }


def _names(text: str | None) -> list[str]:
    return [m.strip() for m in (text or "").split(",") if m.strip()]


GUARANTEE = typer.Option(None, "--guarantee", help="e.g. gpu=4,cpu=16,memory=64Gi")
BORROW = typer.Option(None, "--borrow-limit", help="What it may borrow on top (default: any).")
MEMBERS = typer.Option(None, "--members", help="Users/groups allowed to submit (default: all).")
USER_CAP = typer.Option(None, "--user-gpu-cap", min=0, help="GPUs one user may hold in it.")
PREEMPT = typer.Option(
    True,
    "--preempt-within/--no-preempt-within",
    help="Higher priority classes may preempt lower ones in this VC.",
)
STRICT_FIFO = typer.Option(
    False,
    "--strict-fifo/--no-strict-fifo",
    help="Strict FIFO: no later job of the VC starts while an earlier one waits.",
)
AGING = typer.Option(
    None,
    "--aging",
    help="Attained-service aging (Tiresias LAS): GPU-hour thresholds at which a job drops one "
    "priority step within its class, e.g. 1,10. Default: off.",
)
AGING_MAX_PREEMPTIONS = typer.Option(
    None,
    "--aging-max-preemptions",
    min=1,
    help="With --aging: a job preempted this many times is no longer aged (default: no limit).",
)
DESCRIPTION = typer.Option("", "--description", help="What the virtual cluster is for.")
NAME = typer.Argument(..., help="The virtual cluster's name (`shoal vc list`).")


@vc_app.command("create")
@api_errors
def create(
    name: str = NAME,
    guarantee: str | None = GUARANTEE,
    borrow_limit: str | None = BORROW,
    members: str | None = MEMBERS,
    user_gpu_cap: int | None = USER_CAP,
    preempt_within: bool = PREEMPT,
    strict_fifo: bool = STRICT_FIFO,
    aging: str | None = AGING,
    aging_max_preemptions: int | None = AGING_MAX_PREEMPTIONS,
    description: str = DESCRIPTION,
    idle_timeout: str | None = typer.Option(
        None, "--idle-timeout", help="Stop interactive jobs (notebooks) idle this long, e.g. 2h."
    ),
) -> None:
    """Create a virtual cluster (admins)."""
    settings = _settings(
        guarantee,
        borrow_limit,
        members,
        user_gpu_cap,
        preempt_within,
        strict_fifo,
        aging,
        aging_max_preemptions,
        description,
        idle_timeout,
    )
    client().save_vc(name, settings, create=True)
    console.print(f"virtual cluster {name} created")


vc_app.command("update")(update_command)


@vc_app.command("list")
@api_errors
def list_vcs(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Virtual clusters: guarantee, borrowing limit and what they use now."""
    rows = client().vcs()
    if emit(rows, output):
        return
    table = new_table()
    columns = ("vc", "guarantee", "borrow limit", "used", "user cap", "queue", "members")
    for column in columns:
        table.add_column(column, overflow="fold")
    for vc in rows:
        used = vc["used"]
        table.add_row(
            vc["name"],
            describe_amounts(vc["guarantee"], vc["gpuByType"]),
            "any idle" if vc["borrowLimit"] is None else describe_amounts(vc["borrowLimit"]),
            describe_amounts(used) if any(used.values()) else "-",
            "-" if vc["userGpuCap"] is None else str(vc["userGpuCap"]),
            _queue(vc),
            ",".join(m for m in vc["members"] if m != "*") or "everyone",
        )
    console.print(table)
    console.print(
        "amounts are gpu/cpu/memory; -: not limited; queue fifo: strict FIFO",
        style="dim",
        highlight=False,
    )
    if any(vc.get("aging") for vc in rows):
        console.print(
            "las A,B ≤K: aging, a job drops a step at A, B GPU-hours, ≤K preemptions by it",
            style="dim",
            highlight=False,
        )
    idle = [f"{vc['name']} {format_duration(round(vc['idleTimeoutS']))}" for vc in rows
            if vc.get("idleTimeoutS")]  # fmt: skip
    if idle:
        console.print(f"idle interactive jobs stopped after: {', '.join(idle)}", highlight=False)


def _queue(vc: dict[str, Any]) -> str:
    """``priority``, ``fifo``, or with aging ``las 1,10 ≤1`` (``fifo+las ...``)."""
    aging = vc.get("aging")
    if not aging:
        return "fifo" if vc.get("strictFifo") else "priority"
    hours = ",".join(f"{h:g}" for h in aging["thresholds_gpu_hours"])
    most = aging.get("max_preemptions")
    las = f"las {hours}" + (f" ≤{most}" if most else "")
    return f"fifo+{las}" if vc.get("strictFifo") else las


@vc_app.command()
@api_errors
def delete(name: str = NAME) -> None:
    """Delete a virtual cluster with no active jobs (admins)."""
    client().delete_vc(name)
    console.print(f"virtual cluster {name} deleted")
