"""``shoal job submit|stop``: talk to a running server (the read-only views are in
``job_views``, logs in ``log_commands``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from shoal.cli.code_upload import upload_code
from shoal.cli.common import (
    OUTPUT_OPTION,
    OutputFormat,
    RuntimeChoice,
    api_errors,
    client,
    print_json,
)
from shoal.cli.job_commands import FORMAT_OPTION, PARAM_OPTION, FormatChoice, job_app, parse_params
from shoal.cli.render import console, err_console, labelled
from shoal.cli.task_env import (
    ENV_OPTION,
    FROM_SHELL_OPTION,
    NO_INHERIT_OPTION,
    task_environment,
    uploaded_code_dir,
)
from shoal.client import ShoalClient


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
    return uploaded_code_dir(parsed.jobs[0], file)


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
    env: list[str] | None = ENV_OPTION,
    env_from_shell: bool = FROM_SHELL_OPTION,
    no_inherit_env: bool = NO_INHERIT_OPTION,
    array: str | None = typer.Option(
        None,
        "--array",
        help="Submit it as a job array, as sbatch --array: 0-999, 1,3,5-9 or 0-99:2, with %N to "
        "run at most N elements at once (0-999%50). Each element's tasks get $SHOAL_ARRAY_INDEX.",
    ),
    runtime: RuntimeChoice | None = typer.Option(
        None,
        "--runtime",
        help="Run the tasks as processes or in containers from their roles' images, when the "
        "job file does not say (default: the server's, usually process).",
    ),
    strict_images: bool = typer.Option(
        False,
        "--strict-images",
        help="Refuse the job if an image it needs has not been pushed (shoal image push), "
        "instead of letting it wait for the image.",
    ),
) -> None:
    """Submit a job. With --wait, exit 0 only if it succeeds (an array: every element).

    Tasks start with this shell's PATH and interpreter variables (--env-from-shell: all of
    them; --no-inherit-env: none) and, without a code directory, in this directory."""
    if array is not None:
        check_array(array)
    params = parse_params(param)
    task_env = task_environment(env, env_from_shell, no_inherit_env)
    code_dir = _local_code_dir(file, fmt, params)
    api = client()
    code_hash = upload_code(api, code_dir) if code_dir is not None else None
    submitted = api.submit(
        file.read_text(encoding="utf-8"),
        fmt.value,
        params,
        name,
        vc,
        code_hash=code_hash,
        array=array,
        runtime=None if runtime is None else runtime.value,
        strict_images=strict_images,
        **task_env.submit_fields(code_hash),
    )
    if output is OutputFormat.TEXT:
        for job in submitted:
            console.print(f"submitted {_what(job)}: {job['state']}", highlight=False)
            for w in job["warnings"]:
                err_console.print(labelled("warning", "yellow", f": {w['path']}: {w['message']}"))
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


def check_array(text: str) -> None:
    """A mistyped --array is named before anything is uploaded or submitted (exit 2)."""
    from shoal.spec.arrays import ArrayError, parse_array

    try:
        parse_array(text)
    except ArrayError as exc:
        raise typer.BadParameter(
            f"{text!r}: {exc.message}; {exc.hint}", param_hint="--array"
        ) from None


def _what(job: dict[str, Any]) -> str:
    """``job 7 (train)``, or for an array ``array job 7 (train): 1000 elements 0-999, ...``."""
    what = f"job {job['id']} ({job['name']})"
    array = job.get("array")
    if not array:
        return what
    cap = array.get("cap")
    at_once = f", at most {cap} at once" if cap is not None else ""
    return f"array {what}: {array['size']} elements {array['expression']}{at_once}"


def _wait(api: ShoalClient, job_id: str, output: OutputFormat) -> dict[str, object]:
    if output is OutputFormat.JSON:
        return api.wait(job_id)
    from shoal.cli.log_commands import explain_failure, stream_until_final

    job = stream_until_final(api, job_id)
    console.print(
        f"job {job_id} {job['state']}"
        + (f": {job['diagnostics']}" if job.get("diagnostics") else ""),
        markup=False,
    )
    if job["state"] == "FAILED" and job.get("elements") is not None:
        failed = [e for e in job["elements"] if e["state"] == "FAILED"]
        if failed:
            console.print(f"next: shoal job status {failed[0]['id']}", markup=False)
    elif job["state"] == "FAILED":
        explain_failure(api, job)
    return job


@job_app.command()
@api_errors
def stop(job: str = typer.Argument(..., help="Job id or name.")) -> None:
    """Stop a job: every task's process tree gets SIGTERM, then SIGKILL after the grace period.
    An array's parent stops every element: the waiting ones are cancelled at once."""
    result = client().stop(job)
    line = f"job {result['id']}: {result['state']}"
    if result.get("array"):
        from shoal.cli.job_text import array_counts_text

        line += f" ({array_counts_text(result['array'])})"
    console.print(line, markup=False)
