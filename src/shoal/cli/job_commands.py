"""``shoal job ...``: validate, template and plan (dry run) job files."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shoal.cli.render import print_dry_run, print_jobs, print_problems, print_warnings
from shoal.spec import units

if TYPE_CHECKING:  # imported where used: the CLI starts without pydantic and the planner
    from shoal.planning import DryRun
    from shoal.spec.loader import ParsedJobs
    from shoal.spec.model import JobSpec

job_app = typer.Typer(help="Validate, plan and (with a server) run jobs.", no_args_is_help=True)


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class FormatChoice(StrEnum):
    AUTO = "auto"
    NATIVE = "native"
    PAI = "pai"
    PAI_V1 = "pai-v1"
    MARO = "maro"


def parse_params(values: list[str] | None) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--param")
        params[key] = value
    return params


def _load(
    file: Path, fmt: FormatChoice, params: dict[str, str], output: OutputFormat
) -> ParsedJobs:
    from shoal.spec.errors import SpecError
    from shoal.spec.loader import load_job_file
    from shoal.spec.model import SourceFormat

    try:
        return load_job_file(
            file, params, None if fmt is FormatChoice.AUTO else SourceFormat(fmt.value)
        )
    except SpecError as exc:
        if output is OutputFormat.JSON:
            payload = {"valid": False, "errors": [p.to_dict() for p in exc.problems]}
            typer.echo(json.dumps(payload, indent=2))
        else:
            print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None


FORMAT_OPTION = typer.Option(FormatChoice.AUTO, "--format", "-f", help="Job file format.")
PARAM_OPTION = typer.Option(None, "--param", "-p", help="Override a parameter: NAME=VALUE.")
OUTPUT_OPTION = typer.Option(OutputFormat.TEXT, "--output", "-o", help="text or json.")


@job_app.command()
def validate(
    file: Path = typer.Argument(..., help="Job file: shoal YAML, OpenPAI v2/v1 or MARO."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Check a job file and print the job as shoal understands it (exit 1 on any error)."""
    parsed = _load(file, fmt, parse_params(param), output)
    if output is OutputFormat.JSON:
        payload = {
            "valid": True,
            "format": parsed.format.value,
            "jobs": [job.public_dict() for job in parsed.jobs],
            "warnings": [w.to_dict() for w in parsed.warnings],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    print_jobs(str(file), parsed)
    print_warnings(parsed.warnings)


_TEMPLATE_FILES = {
    (FormatChoice.NATIVE, False): "native.yaml",
    (FormatChoice.NATIVE, True): "native-distributed.yaml",
    (FormatChoice.PAI, False): "pai.yaml",
    (FormatChoice.PAI, True): "pai-distributed.yaml",
    (FormatChoice.PAI_V1, False): "pai-v1.json",
    (FormatChoice.PAI_V1, True): "pai-v1-distributed.json",
    (FormatChoice.MARO, False): "maro.yaml",
    (FormatChoice.MARO, True): "maro-distributed.yaml",
}


def template_text(fmt: FormatChoice, distributed: bool) -> str:
    name = _TEMPLATE_FILES[(fmt, distributed)]
    return resources.files("shoal.spec").joinpath("templates", name).read_text("utf-8")


@job_app.command()
def template(
    fmt: FormatChoice = typer.Option(FormatChoice.NATIVE, "--format", "-f", help="Job format."),
    distributed: bool = typer.Option(False, "--distributed", help="A multi-role job."),
) -> None:
    """Print a commented job file to start from (it validates as it is)."""
    if fmt is FormatChoice.AUTO:
        raise typer.BadParameter("choose native, pai, pai-v1 or maro", param_hint="--format")
    if fmt is FormatChoice.PAI_V1:
        print(
            "# OpenPAI v1 JSON has no comments; fields are described in docs/job-spec.md",
            file=sys.stderr,
        )
    typer.echo(template_text(fmt, distributed), nl=False)


@job_app.command()
def plan(
    file: Path = typer.Argument(..., help="Job file to place."),
    nodes: int = typer.Option(1, "--nodes", min=1, max=10_000, help="Simulated nodes."),
    cpus: float = typer.Option(8, "--cpus", min=0.001, help="Cores per node."),
    memory: str = typer.Option("32Gi", "--memory", help="Memory per node (MiB or 32Gi)."),
    gpus: int = typer.Option(0, "--gpus", min=0, max=64, help="GPUs per node."),
    gpu_type: str | None = typer.Option(None, "--gpu-type", help="GPU type of every node."),
    task: str | None = typer.Option(None, "--env", help="Show the environment of ROLE/INDEX."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Dry run: where would this job's tasks go on an idle cluster, and with what environment?"""
    from shoal.planning import dry_run, simulated_nodes

    try:
        memory_mib = units.memory_mib(memory)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; {units.MEMORY_HINT}", param_hint="--memory") from None
    parsed = _load(file, fmt, parse_params(param), output)
    cluster = simulated_nodes(nodes, cpus, memory_mib, gpus, gpu_type=gpu_type)
    results = [dry_run(job, cluster) for job in parsed.jobs]
    chosen = [parse_task(task, job) for job in parsed.jobs]
    if output is OutputFormat.JSON:
        payload = [_dry_run_json(r, t) for r, t in zip(results, chosen, strict=True)]
        typer.echo(json.dumps(payload, indent=2))
    else:
        for job, result, one in zip(parsed.jobs, results, chosen, strict=True):
            print_dry_run(job, result, one)
    if any(result.admission is None for result in results):
        raise typer.Exit(1)


def parse_task(task: str | None, job: JobSpec) -> tuple[str, int] | None:
    """``ROLE/INDEX`` (or ``ROLE``, meaning index 0) of a task of ``job``."""
    if task is None:
        return None
    role, _, index_text = task.partition("/")
    names = [r.name for r in job.roles]
    if role not in names:
        raise typer.BadParameter(f"no role {role!r}; roles: {', '.join(names)}", param_hint="--env")
    if not (index_text or "0").isdigit() or int(index_text or 0) >= job.role(role).instances:
        raise typer.BadParameter(
            f"index must be 0..{job.role(role).instances - 1}, got {index_text!r}",
            param_hint="--env",
        )
    return role, int(index_text or 0)


def _dry_run_json(result: DryRun, task: tuple[str, int] | None) -> dict[str, object]:
    if result.admission is None:
        reason = result.plan.reason_for("dry-run")
        return {
            "admitted": False,
            "reason": None if reason is None else {"code": reason.code, "message": reason.message},
        }
    placements = [
        {
            "role": p.role,
            "index": p.index,
            "node": p.node,
            "address": p.address,
            "gpus": list(p.gpu_indices),
            "ports": {label: list(ports) for label, ports in p.ports},
        }
        for p in result.admission.placements
    ]
    data: dict[str, object] = {"admitted": True, "placements": placements}
    if task is not None and result.environment is not None:
        data["env"] = result.environment.for_task(*task)
    return data
