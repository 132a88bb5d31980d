"""``shoal run FILE``: run one job in the foreground with no server, streaming its output."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

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
from shoal.client import ShoalClient, ShoalError

if TYPE_CHECKING:
    from shoal.local.foreground import EmbeddedCluster, RunOptions


PORT_BASE_OPTION = typer.Option(
    None,
    "--port-base",
    help="First task port, 1,000 per node (default: the first free block from 30000).",
)


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
    port_base: int | None = PORT_BASE_OPTION,
) -> None:
    """Run a job here and now; exit code 0 if it succeeds, 1 if not, 128+N on signal N.

    Tasks start with this shell's PATH and interpreter variables (--env-from-shell: all of
    them; --no-inherit-env: none) and, without a code directory, in this directory."""
    import psutil

    from shoal.cli.cluster_commands import memory_option_mib
    from shoal.cli.code_upload import upload_code
    from shoal.cli.job_remote import _local_code_dir
    from shoal.local.foreground import RunOptions

    first_port = _port_base(port_base, nodes)
    params = parse_params(param)
    task_env = task_environment(env, env_from_shell, no_inherit_env)
    code_dir = _local_code_dir(file, fmt, params)
    memory_mib = memory_option_mib(memory)
    if cpus is None or memory_mib is None:
        need_cpus, need_memory = _job_needs(file, fmt, params, nodes)
        cpus = cpus if cpus is not None else max(float(os.cpu_count() or 1), need_cpus)
        if memory_mib is None:
            memory_mib = max(psutil.virtual_memory().total >> 20, need_memory)
    options = RunOptions(
        nodes=nodes,
        cpus=cpus,
        memory_mib=memory_mib,
        gpus=gpus,
        keep=keep,
        port_base=first_port,
    )
    text = file.read_text(encoding="utf-8")

    def submit(client: ShoalClient) -> str:
        code_hash = upload_code(client, code_dir, quiet=True) if code_dir is not None else None
        submitted = client.submit(
            text,
            fmt.value,
            params,
            None,
            None,
            code_hash=code_hash,
            **task_env.submit_fields(code_hash),
        )
        return str(submitted[0]["id"])

    code = run_embedded(options, submit)
    if code:
        raise typer.Exit(code)


def _port_base(given: int | None, nodes: int) -> int:
    """The checked ``--port-base``, or the first free block of task ports."""
    from shoal.local.portblock import block_size, free_port_base, port_base_problem

    if given is None:
        found = free_port_base(nodes)
        if found is None:
            raise fail(
                f"no free block of {block_size(nodes)} task ports on this machine; "
                "pick one with --port-base"
            )
        return found
    problem = port_base_problem(given, nodes)
    if problem is not None:
        raise fail(problem)
    return given


def run_embedded(options: RunOptions, submit: Callable[[ShoalClient], str]) -> int:
    """Run one job on an embedded cluster; the exit code. SIGINT, SIGTERM or SIGHUP stop the
    job (SIGTERM to its tasks, SIGKILL after the grace), the agent and the server, remove the
    temporary home, and give 128 + the signal's number."""
    from shoal.local.foreground import EmbeddedCluster, Interrupted, SignalStop, stream_until_done

    job: dict[str, object] | None = None
    job_id: str | None = None
    cluster: EmbeddedCluster | None = None
    with SignalStop() as signals:
        try:
            cluster = EmbeddedCluster(options, signals.check)
            with cluster:
                try:
                    job_id = submit(cluster.client)
                except ShoalError as exc:
                    signals.disarm()
                    raise fail(exc.message) from None
                try:
                    job = stream_until_done(cluster.client, job_id, pause=signals.sleep)
                except Interrupted as exc:
                    err_console.print(
                        f"got {exc.name}: stopping job {job_id} (SIGTERM to its tasks, "
                        f"SIGKILL after {options.kill_grace_s:g}s)"
                    )
                    job = cluster.stop_job(job_id)
                    raise
                signals.disarm()  # the job is over: a signal now only waits for the cleanup
        except Interrupted as exc:
            _report_interrupted(exc.name, job, job_id, cluster, options.keep)
            return 128 + exc.signo
    if options.keep and cluster is not None:
        console.print(f"state kept in {cluster.home}")
    assert job is not None
    note = f": {job['diagnostics']}" if job.get("diagnostics") else ""
    err_console.print(f"job {job['name']} {job['state']}{note}")
    if signals.received is not None:
        return 128 + signals.received
    return 0 if job["state"] == "SUCCEEDED" else 1


def _report_interrupted(
    name: str,
    job: dict[str, object] | None,
    job_id: str | None,
    cluster: EmbeddedCluster | None,
    keep: bool,
) -> None:
    if job_id is None:
        what = "stopped before the job was submitted"
    elif job is None:
        what = f"job {job_id}: its tasks were ended by the agent's stop"
    else:
        what = f"job {job['name']} {job['state']}"
    home = ""
    if cluster is not None:
        home = f"; state kept in {cluster.home}" if keep else f"; removed {cluster.home}"
    err_console.print(f"{name}: {what}; agent and server stopped{home}")
