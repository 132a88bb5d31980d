"""How the CLI shows jobs, problems and plans to a person (tables via rich).

Both consoles print text as it is, never as Rich markup: a path, a name or a message with
``[cluster]`` or ``[x]`` in it is shown whole (``pip install 'shoal[cluster]'``). Colour comes
only from :func:`labelled` (a styled label before plain text) or ``style=``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from shoal.cli.columns import Column, table_text
from shoal.spec.units import format_cpu, format_memory

if TYPE_CHECKING:
    from rich.table import Table

    # the CLI starts without the planner and pydantic (test_cli_imports.py)
    from shoal.spec.errors import SpecProblem
    from shoal.spec.loader import ParsedJobs
    from shoal.spec.model import JobSpec

console = Console(highlight=False, soft_wrap=True, markup=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
if not console.is_terminal:
    console.width = 4096  # piped: tables are as wide as their values, never cut to 80 columns


def labelled(label: str, style: str, text: str) -> Text:
    """``label`` in ``style``, then ``text`` as it is (never read as markup)."""
    return Text.assemble((label, style), text)


def new_table() -> Table:
    """A borderless table (rich.table loads only when a command prints one)."""
    from rich.table import Table

    return Table(show_edge=False, pad_edge=False)


def print_problems(source: str, problems: Sequence[SpecProblem]) -> None:
    count = len(problems)
    err_console.print(
        labelled("error", "bold red", f": {source}: {count} problem{'s' if count > 1 else ''}")
    )
    for problem in problems:
        err_console.print(f"  {problem.render()}")


def print_warnings(warnings: Sequence[SpecProblem]) -> None:
    for warning in warnings:
        err_console.print(labelled("warning", "yellow", f": {warning.render()}"))


def _policy(value: int | None, none_text: str) -> str:
    return none_text if value is None else str(value)


def print_jobs(source: str, parsed: ParsedJobs) -> None:
    for job in parsed.jobs:
        console.print(
            labelled(
                "valid",
                "green",
                f": {source}: {parsed.format.value} job {job.name} "
                f"({len(job.roles)} role{'s' if len(job.roles) > 1 else ''}, "
                f"{job.total_instances} task{'s' if job.total_instances > 1 else ''})",
            )
        )
        _print_job(job)


def _print_job(job: JobSpec) -> None:
    details = [
        f"vc={job.virtual_cluster or 'default'}",
        f"priority={job.priority_class.value}",
        f"gang={'yes' if job.gang else 'no'}",
        f"job retries={job.job_retry_count}",
    ]
    if job.max_runtime_s:
        details.append(f"max runtime={job.max_runtime_s}s")
    if job.secrets:
        details.append(f"secrets={len(job.secrets)} (masked)")
    console.print("  " + ", ".join(details))
    table = new_table()
    for column in ("role", "instances", "cpu", "memory", "gpu", "ports", "completion", "retries"):
        table.add_column(column)
    for role in job.roles:
        res = role.resources
        gpu = f"{res.gpu}" + (f" ({res.gpu_type})" if res.gpu_type else "")
        ports = ", ".join(f"{k}×{v}" for k, v in res.ports.items()) or "-"
        completion = (
            f"fail≥{_policy(role.completion.min_failed, 'never')}, "
            f"succeed≥{_policy(role.completion.min_succeeded, 'all done')}"
        )
        table.add_row(
            role.name,
            str(role.instances),
            format_cpu(res.cpu_millis),
            format_memory(res.memory_mib),
            gpu,
            ports,
            completion,
            str(role.task_retry_count),
        )
    console.print(table)
    for role in job.roles:
        console.print(f"  {role.name} command:")
        for line in role.command.splitlines():
            console.print(f"    {line}")


def print_plan(result: dict[str, Any], task: str | None) -> None:
    """One job's dry run (simulated or the server's), from its JSON form."""
    name = result["name"]
    if not result["admitted"]:
        reason = result.get("reason")
        text = f"{reason['code']}: {reason['message']}" if reason else "not placed"
        err_console.print(labelled(name, "bold red", f" would not start now: {text}"))
        return
    console.print(labelled(name, "green", f": all {len(result['placements'])} tasks placed"))
    if result.get("preempting"):
        console.print(f"  by preempting: {', '.join(result['preempting'])}")
    rows = [
        [
            f"{p['role']}/{p['index']}",
            p["node"],
            p["address"],
            ",".join(map(str, p["gpus"])) or "-",
            " ".join(f"{k}={','.join(map(str, v))}" for k, v in p["ports"].items()),
        ]
        for p in result["placements"]
    ]
    columns = [Column("TASK"), Column("NODE"), Column("ADDRESS"), Column("GPUS"), Column("PORTS")]
    console.print(table_text(columns, rows, None))
    env = result.get("env")
    if task is not None and env is not None:
        console.print(f"environment of {task}:")
        for key in sorted(env):
            console.print(f"  {key}={env[key]}")
