"""``shoal vc create|update|list|delete``: virtual clusters, changed live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.table import Table

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit
from shoal.cli.render import console
from shoal.spec import units

vc_app = typer.Typer(help="Virtual clusters: teams' guaranteed shares.", no_args_is_help=True)

RESOURCE_HINT = "write e.g. gpu=4,gpu.A100=2,cpu=16,memory=64Gi"


def parse_resources(text: str | None, option: str) -> dict[str, float] | None:
    """``gpu=4,cpu=16,memory=64Gi`` → {"gpu": 4, "cpu": 16, "memory_mib": 65536}."""
    if text is None:
        return None
    parsed: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        try:
            if not sep:
                raise ValueError(f"{item!r} is not NAME=VALUE")
            if key == "gpu":
                parsed["gpu"] = int(value)
            elif key == "cpu":
                parsed["cpu"] = units.cpu_millis(float(value)) / 1000
            elif key.startswith("gpu."):
                parsed[key] = int(value)
            elif key == "memory":
                parsed["memory_mib"] = units.memory_mib(
                    value if not value.isdigit() else int(value)
                )
            else:
                raise ValueError(f"unknown resource {key!r} (use gpu, gpu.TYPE, cpu, memory)")
        except ValueError as exc:
            raise typer.BadParameter(f"{exc}; {RESOURCE_HINT}", param_hint=option) from None
        if parsed.get(key if key != "memory" else "memory_mib", 0) < 0:
            raise typer.BadParameter(f"{key} must be >= 0", param_hint=option)
    return parsed


def _settings(
    guarantee: str | None,
    borrow: str | None,
    members: str | None,
    user_gpu_cap: int | None,
    preempt_within: bool,
    description: str,
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
        "members": [m for m in (members or "").split(",") if m],
    }


GUARANTEE = typer.Option(None, "--guarantee", help="e.g. gpu=4,cpu=16,memory=64Gi")
BORROW = typer.Option(None, "--borrow-limit", help="What it may borrow on top (default: any).")
MEMBERS = typer.Option(None, "--members", help="Users/groups allowed to submit (default: all).")
USER_CAP = typer.Option(None, "--user-gpu-cap", min=0, help="GPUs one user may hold in it.")
PREEMPT = typer.Option(
    True,
    "--preempt-within/--no-preempt-within",
    help="Higher priority classes may preempt lower ones in this VC.",
)
DESCRIPTION = typer.Option("", "--description")


def _save_command(create: bool) -> Callable[..., None]:
    """`vc create` and `vc update` take the same settings; only the verb differs."""

    @api_errors
    def command(
        name: str,
        guarantee: str | None = GUARANTEE,
        borrow_limit: str | None = BORROW,
        members: str | None = MEMBERS,
        user_gpu_cap: int | None = USER_CAP,
        preempt_within: bool = PREEMPT,
        description: str = DESCRIPTION,
    ) -> None:
        settings = _settings(
            guarantee, borrow_limit, members, user_gpu_cap, preempt_within, description
        )
        client().save_vc(name, settings, create=create)
        console.print(f"virtual cluster {name} {'created' if create else 'updated'}")

    command.__doc__ = (
        "Create a virtual cluster (admins)."
        if create
        else "Change a virtual cluster live (admins); settings not given are reset to defaults."
    )
    return command


vc_app.command("create")(_save_command(create=True))
vc_app.command("update")(_save_command(create=False))


@vc_app.command("list")
@api_errors
def list_vcs(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Virtual clusters: guarantee, borrowing limit and what they use now."""
    rows = client().vcs()
    if emit(rows, output):
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in (
        "vc",
        "guaranteed gpu/cpu",
        "borrow limit",
        "used gpu/cpu",
        "user cap",
        "members",
    ):
        table.add_column(column)
    for vc in rows:
        g, u, b = vc["guarantee"], vc["used"], vc["borrowLimit"]
        limit = "any idle" if b is None else f"{b['gpu']:g} gpu"
        table.add_row(
            vc["name"],
            f"{g['gpu']:g} / {g['cpu']:g}",
            limit,
            f"{u['gpu']:g} / {u['cpu']:g}",
            str(vc["userGpuCap"] or "-"),
            ",".join(vc["members"]) or "all",
        )
    console.print(table)


@vc_app.command()
@api_errors
def delete(name: str) -> None:
    """Delete a virtual cluster with no active jobs (admins)."""
    client().delete_vc(name)
    console.print(f"virtual cluster {name} deleted")
