"""``shoal run FILE``: run one job in the foreground with no server, streaming its output."""

from __future__ import annotations

import math
import os
from pathlib import Path

import typer

from shoal.cli.common import fail
from shoal.cli.job_commands import FORMAT_OPTION, PARAM_OPTION, FormatChoice, parse_params
from shoal.cli.render import console, err_console
from shoal.cli.task_env import (
    ENV_OPTION,
    FROM_SHELL_OPTION,
    NO_INHERIT_OPTION,
    task_environment,
)
from shoal.client import ShoalError


def _job_needs(
    file: Path, fmt: FormatChoice, params: dict[str, str], nodes: int
) -> tuple[float, int]:
    """Per-node cpu and memory that fit the whole job: a local run sizes its nodes to the job
    (tasks share this machine's cores, as MARO's process mode did) unless told otherwise."""
    from shoal.spec.loader import load_job_file
    from shoal.spec.model import SourceFormat

    spec = load_job_file(
        file, params, None if fmt is FormatChoice.AUTO else SourceFormat(fmt.value)
    ).jobs[0]
    cpu = sum(r.instances * r.resources.cpu_millis for r in spec.roles) / 1000
    memory = sum(r.instances * r.resources.memory_mib for r in spec.roles)
    return math.ceil(cpu / nodes * 10) / 10, math.ceil(memory / nodes)


def run(
    file: Path = typer.Argument(..., help="Job file (shoal, OpenPAI v2/v1 or MARO)."),
    nodes: int = typer.Option(1, "--nodes", min=1, max=64, help="Simulated nodes."),
    cpus: float | None = typer.Option(None, "--cpus", min=0.001, help="Cores per node."),
    memory: str | None = typer.Option(None, "--memory", help="Memory per node."),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64, help="GPUs per node."),
    fmt: FormatChoice = FORMAT_OPTION,
    param: list[str] | None = PARAM_OPTION,
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary state directory."),
    env: list[str] | None = ENV_OPTION,
    env_from_shell: bool = FROM_SHELL_OPTION,
    no_inherit_env: bool = NO_INHERIT_OPTION,
) -> None:
    """Run a job here and now; exit code 0 if it succeeds, 1 if not.

    Tasks start with this shell's PATH and interpreter variables (--env-from-shell: all of
    them; --no-inherit-env: none) and, without a code directory, in this directory."""
    import psutil

    from shoal.cli.cluster_commands import _memory
    from shoal.cli.job_remote import _local_code_dir, code_archive
    from shoal.local.foreground import EmbeddedCluster, RunOptions, stream_until_done

    params = parse_params(param)
    task_env = task_environment(env, env_from_shell, no_inherit_env)
    code_dir = _local_code_dir(file, fmt, params)
    archive = code_archive(code_dir) if code_dir is not None else None
    memory_mib = _memory(memory)
    if cpus is None or memory_mib is None:
        need_cpus, need_memory = _job_needs(file, fmt, params, nodes)
        cpus = cpus if cpus is not None else max(float(os.cpu_count() or 1), need_cpus)
        if memory_mib is None:
            memory_mib = max(psutil.virtual_memory().total >> 20, need_memory)
    options = RunOptions(nodes=nodes, cpus=cpus, memory_mib=memory_mib, gpus=gpus, keep=keep)
    with EmbeddedCluster(options) as cluster:
        try:
            submitted = cluster.client.submit(
                file.read_text(encoding="utf-8"),
                fmt.value,
                params,
                None,
                None,
                archive,
                env=task_env.env,
                environment=task_env.inherited,
                workdir=str(Path.cwd()) if archive is None else None,
            )
        except ShoalError as exc:
            raise fail(exc.message) from None
        job_id = submitted[0]["id"]
        try:
            job = stream_until_done(cluster.client, job_id)
        except KeyboardInterrupt:
            err_console.print("stopping the job...")
            cluster.client.stop(job_id)
            cluster.client.wait(job_id, timeout_s=60)
            raise typer.Exit(130) from None
        if keep:
            console.print(f"state kept in {cluster.home}")
    note = f": {job['diagnostics']}" if job.get("diagnostics") else ""
    err_console.print(f"job {job['name']} {job['state']}{note}")
    if job["state"] != "SUCCEEDED":
        raise typer.Exit(1)
