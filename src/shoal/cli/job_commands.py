"""``shoal job ...``: validate, template and plan (dry run) job files."""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, emit, fail
from shoal.cli.render import (
    err_console,
    print_jobs,
    print_plan,
    print_problems,
    print_warnings,
)
from shoal.cli.task_env import start_dir_note
from shoal.client import ServerUnavailable, ShoalClient, ShoalError
from shoal.spec import units

if TYPE_CHECKING:  # imported where used: the CLI starts without pydantic and the planner
    from shoal.planning import DryRun
    from shoal.spec.loader import ParsedJobs
    from shoal.spec.model import JobSpec

job_app = typer.Typer(help="Validate, plan and (with a server) run jobs.", no_args_is_help=True)


class FormatChoice(StrEnum):
    AUTO = "auto"
    NATIVE = "native"
    PAI = "pai"
    PAI_V1 = "pai-v1"
    MARO = "maro"


class TemplateFormat(StrEnum):
    """The formats a template exists in (``auto`` is for reading files, not writing them)."""

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
        if not emit({"valid": False, "errors": [p.to_dict() for p in exc.problems]}, output):
            print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None


FORMAT_OPTION = typer.Option(FormatChoice.AUTO, "--format", "-f", help="Job file format.")
PARAM_OPTION = typer.Option(None, "--param", "-p", help="Override a parameter: NAME=VALUE.")


@job_app.command()
def validate(
    file: Path = typer.Argument(..., help="Job file: shoal YAML, OpenPAI v2/v1 or MARO."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Check a job file and print the job as shoal understands it (exit 1 on any error)."""
    from shoal.spec.errors import SpecProblem

    parsed = _load(file, fmt, parse_params(param), output)
    notes = [start_dir_note(job, file, Path.cwd()) for job in parsed.jobs]
    warnings = [*parsed.warnings, *(SpecProblem("code_dir", n) for n in notes if n)]
    payload = {
        "valid": True,
        "format": parsed.format.value,
        "jobs": [job.public_dict() for job in parsed.jobs],
        "warnings": [w.to_dict() for w in warnings],
    }
    if emit(payload, output):
        return
    print_jobs(str(file), parsed)
    print_warnings(warnings)


_TEMPLATE_FILES = {
    (TemplateFormat.NATIVE, False): "native.yaml",
    (TemplateFormat.NATIVE, True): "native-distributed.yaml",
    (TemplateFormat.PAI, False): "pai.yaml",
    (TemplateFormat.PAI, True): "pai-distributed.yaml",
    (TemplateFormat.PAI_V1, False): "pai-v1.json",
    (TemplateFormat.PAI_V1, True): "pai-v1-distributed.json",
    (TemplateFormat.MARO, False): "maro.yaml",
    (TemplateFormat.MARO, True): "maro-distributed.yaml",
}


class TemplateKind(StrEnum):
    """Ready-made interactive jobs (docs/notebooks.md), in shoal's native format."""

    JUPYTER = "jupyter"
    TENSORBOARD = "tensorboard"


def template_text(fmt: TemplateFormat, distributed: bool, kind: TemplateKind | None = None) -> str:
    name = f"{kind.value}.yaml" if kind else _TEMPLATE_FILES[(fmt, distributed)]
    return resources.files("shoal.spec").joinpath("templates", name).read_text("utf-8")


@job_app.command()
def template(
    kind: TemplateKind | None = typer.Argument(
        None, help="jupyter or tensorboard: a notebook or TensorBoard opened from the dashboard."
    ),
    fmt: TemplateFormat = typer.Option(TemplateFormat.NATIVE, "--format", "-f", help="Job format."),
    distributed: bool = typer.Option(False, "--distributed", help="A multi-role job."),
) -> None:
    """Print a job file to start from (it validates as it is). The YAML ones are commented;
    pai-v1 is plain JSON (JSON has no comments: docs/job-spec.md describes its fields).
    `shoal job template jupyter` and `tensorboard` are ready to submit (docs/notebooks.md)."""
    if kind is not None and (fmt is not TemplateFormat.NATIVE or distributed):
        raise typer.BadParameter(
            f"the {kind.value} template exists in shoal's native format only: drop --format "
            "and --distributed",
            param_hint="KIND",
        )
    typer.echo(template_text(fmt, distributed, kind), nl=False)


@job_app.command()
def plan(
    file: Path = typer.Argument(..., help="Job file to place."),
    nodes: int | None = typer.Option(None, "--nodes", min=1, max=10_000, help="Simulated nodes."),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001, help="Cores per node."),
    memory: str | None = typer.Option(None, "--memory", help="Memory per node (MiB or 32Gi)."),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64, help="GPUs per node."),
    gpu_type: str | None = typer.Option(None, "--gpu-type", help="GPU type of every node."),
    simulate: bool = typer.Option(
        False, "--simulate", help="Plan on simulated idle nodes even if a server answers."
    ),
    task: str | None = typer.Option(None, "--task", help="Show the environment of ROLE/INDEX."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Dry run: where would this job's tasks go, and with what environment? On the running
    server's cluster as it is now (its nodes, running jobs and queue) when one answers; on
    simulated idle nodes with --simulate, any of --nodes/--cpus/--memory/--gpus/--gpu-type, or
    when no server answers. Exit 1 if it would not start now."""
    explicit = any(v is not None for v in (nodes, cpus, memory, gpus, gpu_type))
    nodes, cpus, memory, gpus = nodes or 1, cpus or 8.0, memory or "32Gi", gpus or 0
    from shoal.planning import dry_run, simulated_nodes

    try:
        memory_mib = units.memory_mib(memory)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; {units.MEMORY_HINT}", param_hint="--memory") from None
    params = parse_params(param)
    parsed = _load(file, fmt, params, output)
    for job in parsed.jobs:
        parse_task(task, job)
    offline = simulate or explicit
    results = None if offline else plan_on_server(file, fmt, params, task)
    if results is None:
        cluster = simulated_nodes(nodes, cpus, memory_mib, gpus, gpu_type=gpu_type)
        results = [
            _dry_run_json(dry_run(job, cluster), parse_task(task, job), job.name)
            for job in parsed.jobs
        ]
        if not offline:
            err_console.print(
                f"note: planned on {len(cluster)} simulated idle node(s) "
                f"({cpus:g} cores, {memory}, {gpus} GPUs; "
                "see --nodes/--cpus/--memory/--gpus)",
                highlight=False,
            )
    if not emit(results, output):
        for result in results:
            print_plan(result, task)
    if any(not result["admitted"] for result in results):
        raise typer.Exit(1)


def plan_on_server(
    file: Path, fmt: FormatChoice, params: dict[str, str], task: str | None
) -> list[dict[str, Any]] | None:
    """The server's plan, or None (with a note) if no server answers."""
    api = ShoalClient.from_environment()
    try:
        results = api.plan(file.read_text(encoding="utf-8"), fmt.value, params, task=task)
    except ServerUnavailable:
        err_console.print(f"note: no shoal server answers at {api.url}", highlight=False)
        return None
    except ShoalError as exc:
        raise fail(f"the server at {api.url} could not plan it: {exc.message}") from None
    nodes = results[0]["nodes"] if results else 0
    err_console.print(
        f"note: planned on the server at {api.url}: its {nodes} node(s) with the jobs running "
        "and queued now (--simulate: idle simulated nodes instead)",
        highlight=False,
    )
    return [{**result, "cluster": "server"} for result in results]


def parse_task(task: str | None, job: JobSpec) -> tuple[str, int] | None:
    """``ROLE/INDEX`` (or ``ROLE``, meaning index 0) of a task of ``job``."""
    if task is None:
        return None
    role, _, index_text = task.partition("/")
    names = [r.name for r in job.roles]
    if role not in names:
        raise typer.BadParameter(
            f"no role {role!r}; roles: {', '.join(names)}", param_hint="--task"
        )
    if not (index_text or "0").isdigit() or int(index_text or 0) >= job.role(role).instances:
        raise typer.BadParameter(
            f"index must be 0..{job.role(role).instances - 1}, got {index_text!r}",
            param_hint="--task",
        )
    return role, int(index_text or 0)


def _dry_run_json(result: DryRun, task: tuple[str, int] | None, name: str) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "cluster": "simulated"}
    if result.admission is None:
        reason = result.plan.reason_for("dry-run")
        data["admitted"] = False
        data["reason"] = (
            None if reason is None else {"code": reason.code, "message": reason.message}
        )
        return data
    data["admitted"] = True
    data["placements"] = [
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
    if task is not None and result.environment is not None:
        data["env"] = result.environment.for_task(*task)
    return data


from shoal.cli import exec_command, port_forward, share_command  # noqa: E402  (no cycle)

exec_command.register(job_app)  # `job exec`, `job exec-sessions`
port_forward.register(job_app)  # `job port-forward` (docs/proxy.md)
share_command.register(job_app)  # `job share` (docs/proxy.md)
from shoal.cli import release_command  # noqa: E402

release_command.register(job_app)  # `job release` (docs/debug-jobs.md)
