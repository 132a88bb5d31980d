"""``shoal cluster pools`` and ``shoal cluster scale POOL N``: the cloud node pools (docs/cloud.md;
MARO's ``grass node scale``)."""

from __future__ import annotations

import time
from typing import Any

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console, new_table


def _ago(at: float | None) -> str:
    return "-" if at is None else f"{max(0.0, time.time() - at):.0f} s"


def pools_table(pools: list[dict[str, Any]]) -> None:
    table = new_table()
    for column in ("POOL", "SIZE", "MIN-MAX", "TARGET", "PRICE/H", "NODE-H", "COST"):
        table.add_column(column)
    for pool in pools:
        price = pool["pricePerHour"]
        table.add_row(
            pool["name"],
            str(pool["size"]),
            f"{pool['min']}-{pool['max']}",
            "-" if pool["target"] is None else str(pool["target"]),
            "-" if price is None else f"{price:g}",
            f"{pool['nodeHours']:.2f}",
            f"{pool['cost']:.2f}",
        )
    console.print(table)
    machines = [m for p in pools for m in p["machines"]]  # a node's name starts with its pool's
    if machines:
        table = new_table()
        for column in ("NODE", "PHASE", "ZONE/TYPE", "AGE", "IDLE"):
            table.add_column(column)
        for m in machines:
            idle = _ago(m["idleSince"]) if m["idleSince"] else "-"
            offer = m["offer"].split("/", 1)[-1] if m["offer"] else "-"  # the region is the pool's
            table.add_row(m["node"], m["phase"], offer, _ago(m["launchedAt"]), idle)
        console.print(table)
    for pool in pools:
        for blocked in pool.get("blockedOffers") or []:
            console.print(f"pool {pool['name']}: not trying {blocked}", markup=False)
        if pool["offerError"]:
            said = f"pool {pool['name']}: asking for offers failed: {pool['offerError']}"
            console.print(said, markup=False)


@api_errors
def pools(output: OutputFormat = OUTPUT_OPTION) -> None:
    """The cloud pools: size, bounds, price, node-hours and cost, and their machines."""
    found = client().pools()
    if not emit(found, output):
        pools_table(found)


@api_errors
def scale(
    pool: str = typer.Argument(..., help="The pool, as named in the cloud file."),
    size: int | None = typer.Argument(None, min=0, help="Its size from now on."),
    auto: bool = typer.Option(False, "--auto", help="Back to the cloud file's min and max."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Set a pool's size: machines are launched, or idle ones above it drained and removed; the
    size then holds as the pool's minimum (busy machines go once idle). --auto undoes it."""
    if (size is None) == (not auto):
        raise fail("give a size (shoal cluster scale POOL N) or --auto, not both or neither")
    result = client().scale_pool(pool, None if auto else size)
    if not emit(result, output):
        said = "its file's min and max" if auto else f"a target of {size}"
        console.print(f"pool {pool}: {said}; {result['size']} machine(s) now", markup=False)


def register(app: typer.Typer) -> None:
    app.command("pools")(pools)
    app.command("scale")(scale)
