"""``shoal job submit|list|status|logs|stop|events``: talk to a running server."""

from __future__ import annotations

import base64
import io
import sys
import time
from pathlib import Path

import typer
from rich.table import Table

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, fail, print_json
from shoal.cli.job_commands import FORMAT_OPTION, PARAM_OPTION, FormatChoice, job_app, parse_params
from shoal.cli.render import console, err_console
from shoal.client import TERMINAL, ShoalClient

SKIPPED = {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
MAX_ARCHIVE = 100 * 1024 * 1024


def code_archive(directory: Path) -> str:
    """The directory as a base64 .tar.gz (without VCS and cache folders)."""
    import tarfile

    if not directory.is_dir():
        raise fail(f"code directory {directory} does not exist")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(
            directory,
            arcname=".",
            filter=lambda info: None if set(Path(info.name).parts) & SKIPPED else info,
        )
    if buffer.tell() > MAX_ARCHIVE:
        raise fail(f"code directory {directory} is over {MAX_ARCHIVE >> 20} MiB compressed")
    return base64.b64encode(buffer.getvalue()).decode()


def _local_code_dir(file: Path, fmt: FormatChoice, params: dict[str, str]) -> Path | None:
    """Validate locally (fast, precise errors) and find the code directory to upload."""
    from shoal.spec.errors import SpecError  # pydantic loads only when a job file is read
    from shoal.spec.loader import load_job_file
    from shoal.spec.model import SourceFormat

    try:
        parsed = load_job_file(
            file, params, None if fmt is FormatChoice.AUTO else SourceFormat(fmt.value)
        )
    except SpecError as exc:
        from shoal.cli.render import print_problems

        print_problems(str(file), exc.problems)
        raise typer.Exit(1) from None
    code_dir = parsed.jobs[0].code_dir
    if code_dir is None or code_dir.startswith(("hdfs://", "$")):
        return None
    path = Path(code_dir)
    return path if path.is_absolute() else (file.parent / path).resolve()


@job_app.command()
@api_errors
def submit(
    file: Path = typer.Argument(..., help="Job file (shoal, OpenPAI v2/v1 or MARO)."),
    name: str | None = typer.Option(None, "--name", help="Job name (default: from the file)."),
    vc: str | None = typer.Option(None, "--vc", help="Virtual cluster."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    wait: bool = typer.Option(False, "--wait", help="Wait for the job to finish."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Submit a job. With --wait, exit 0 only if it succeeds."""
    params = parse_params(param)
    code_dir = _local_code_dir(file, fmt, params)
    archive = code_archive(code_dir) if code_dir is not None else None
    api = client()
    submitted = api.submit(file.read_text(encoding="utf-8"), fmt.value, params, name, vc, archive)
    if output is OutputFormat.TEXT:
        for job in submitted:
            console.print(f"submitted job [bold]{job['id']}[/] ({job['name']}): {job['state']}")
            for w in job["warnings"]:
                err_console.print(f"[yellow]warning[/]: {w['path']}: {w['message']}")
    if not wait:
        if output is OutputFormat.JSON:
            print_json(submitted[0] if len(submitted) == 1 else submitted)
        return
    finals = [_wait(api, job["id"], output) for job in submitted]
    if output is OutputFormat.JSON:
        merged = [
            {**s, "state": f["state"], "exitCode": f["exitCode"]}
            for s, f in zip(submitted, finals, strict=True)
        ]
        print_json(merged[0] if len(merged) == 1 else merged)
    if any(f["state"] != "SUCCEEDED" for f in finals):
        raise typer.Exit(1)


def _wait(api: ShoalClient, job_id: str, output: OutputFormat) -> dict[str, object]:
    if output is OutputFormat.JSON:
        return api.wait(job_id)
    with console.status(f"job {job_id}: waiting") as spinner:
        while True:
            job = api.job(job_id)
            if job["state"] in TERMINAL:
                break
            note = (
                f" ({job['pending']['code']}: {job['pending']['message']})"
                if job.get("pending")
                else ""
            )
            spinner.update(f"job {job_id}: {job['state']}{note}")
            time.sleep(0.2)
    console.print(
        f"job {job_id} {job['state']}"
        + (f": {job['diagnostics']}" if job.get("diagnostics") else "")
    )
    return job


@job_app.command("list")
@api_errors
def list_jobs(
    state: list[str] | None = typer.Option(None, "--state", help="Only jobs in this state."),
    all_jobs: bool = typer.Option(False, "--all", help="Include finished jobs."),
    limit: int = typer.Option(100, "--limit", min=1, max=10000),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Jobs, newest first (unfinished ones unless --all or --state)."""
    states = [s.upper() for s in state] if state else None
    if states is None and not all_jobs:
        states = ["WAITING", "RUNNING", "STOPPING"]
    jobs = client().jobs(states, limit)
    if output is OutputFormat.JSON:
        print_json(jobs)
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in ("id", "name", "user", "vc", "state", "tasks", "gpus", "submitted", "note"):
        table.add_column(column)
    for job in jobs:
        note = job["pending"]["code"] if job.get("pending") else (job.get("exitClass") or "")
        table.add_row(
            job["id"],
            job["name"],
            job["user"],
            job["virtualCluster"],
            job["state"],
            str(job["taskCount"]),
            str(job["gpus"]),
            time.strftime("%H:%M:%S", time.localtime(job["submittedAt"])),
            note,
        )
    console.print(table)


@job_app.command("status")
@api_errors
def job_status(
    job: str = typer.Argument(..., help="Job id or name."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """A job's state, its tasks, and why it waits (if it does)."""
    api = client()
    detail = api.job(job)
    if output is OutputFormat.JSON:
        print_json(detail)
        return
    console.print(
        f"job [bold]{detail['id']}[/] {detail['name']}: {detail['state']} "
        f"(user {detail['user']}, vc {detail['virtualCluster']}, attempt "
        f"{detail['attempt']})"
    )
    if detail.get("pending"):
        p = detail["pending"]
        console.print(
            f"  waiting: {p['code']}: {p['message']} (position {p['position']} in "
            f"virtual cluster {detail['virtualCluster']})"
        )
        blockers = api.why(detail["id"])["blockers"]
        if blockers:
            console.print(
                f"  it fits once these jobs finish or are preempted: {', '.join(blockers)}"
            )
    if detail.get("diagnostics"):
        console.print(f"  {detail['diagnostics']}")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("task", "state", "node", "gpus", "ports", "exit", "attempt"):
        table.add_column(column)
    for t in detail["tasks"]:
        ports = " ".join(f"{k}={','.join(map(str, v))}" for k, v in t["ports"].items())
        exit_text = "" if t["exitCode"] is None else f"{t['exitCode']} {t['exitClass']}"
        table.add_row(
            f"{t['role']}/{t['index']}",
            t["state"],
            t["node"],
            ",".join(map(str, t["gpus"])) or "-",
            ports,
            exit_text,
            str(t["attempt"]),
        )
    console.print(table)


def _task(task: str | None) -> tuple[str | None, int]:
    if task is None:
        return None, 0
    role, _, index = task.partition("/")
    if not index.isdigit() and index:
        raise typer.BadParameter("use ROLE/INDEX, e.g. worker/0", param_hint="--task")
    return role, int(index or 0)


@job_app.command()
@api_errors
def logs(
    job: str = typer.Argument(..., help="Job id or name."),
    task: str | None = typer.Option(None, "--task", help="ROLE/INDEX (default: the first)."),
    stderr: bool = typer.Option(False, "--stderr", help="Show stderr instead of stdout."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as it grows."),
) -> None:
    """A task's output; complete after the task ends, live with -f."""
    role, index = _task(task)
    stream = "stderr" if stderr else "stdout"
    api = client()
    if follow:
        for text in api.follow_logs(job, role, index, stream):
            sys.stdout.write(text)
            sys.stdout.flush()
        return
    offset = 0
    while True:
        chunk = api.logs(job, role, index, stream, offset)
        sys.stdout.write(chunk["data"])
        if not chunk["data"]:
            break
        offset = chunk["nextOffset"]
    sys.stdout.flush()


@job_app.command()
@api_errors
def stop(job: str = typer.Argument(..., help="Job id or name.")) -> None:
    """Stop a job: every task's process tree gets SIGTERM, then SIGKILL after the grace period."""
    result = client().stop(job)
    console.print(f"job {result['id']}: {result['state']}")


@job_app.command()
@api_errors
def events(job: str = typer.Argument(...), output: OutputFormat = OUTPUT_OPTION) -> None:
    """What happened to a job, in order."""
    rows = client().events(job)
    if output is OutputFormat.JSON:
        print_json(rows)
        return
    for e in rows:
        stamp = (
            time.strftime("%H:%M:%S", time.localtime(e["at"])) + f".{int(e['at'] % 1 * 1000):03d}"
        )
        console.print(f"{stamp} {e['kind']:<9} {e['message']}", markup=False)


@job_app.command()
@api_errors
def why(
    job: str = typer.Argument(..., help="Job id or name."), output: OutputFormat = OUTPUT_OPTION
) -> None:
    """Why is this job pending? Its reason, queue position, and what stands in its way."""
    detail = client().why(job)
    if output is OutputFormat.JSON:
        print_json(detail)
        return
    if detail["state"] != "WAITING":
        console.print(f"job {detail['id']} is {detail['state']}, not waiting")
        return
    console.print(
        f"job {detail['id']} waits in virtual cluster {detail['virtualCluster']}, "
        f"position {detail['position'] or '?'} in its queue"
    )
    console.print(f"  {detail['code'] or 'Queued'}: {detail['message'] or 'not looked at yet'}")
    if detail["preempting"]:
        console.print(f"  being made room for by preempting: {', '.join(detail['preempting'])}")
    blockers = detail["blockers"]
    if blockers is None:
        console.print("  it would not fit even on an idle cluster")
    elif blockers:
        console.print(f"  it fits once these jobs finish or are preempted: {', '.join(blockers)}")
