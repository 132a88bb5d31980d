"""``shoal user key add|list|rm`` (a user's SSH public keys) and ``shoal job ssh`` (docs/ssh.md).

``shoal job ssh`` runs the real ``ssh`` client: it reaches the task's sshd through the server
(``ProxyCommand``: ``shoal job port-forward JOB --task ROLE/INDEX --stdio ssh``, the server's
authenticated tunnel), so no task port is exposed; it logs in as the job's user with the user's
own key, and checks the task's host key against the job's, published by the server, in a
known_hosts file of its own."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer

from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.client import config as clientconfig

key_app = typer.Typer(help="Your SSH public keys (docs/ssh.md).", no_args_is_help=True)
_KEY_COLUMNS = [Column("NAME"), Column("FINGERPRINT"), Column("KEY")]


@key_app.command("add")
@api_errors
def add_key(
    file: str = typer.Argument(
        ..., help="A public key file (~/.ssh/id_ed25519.pub), or - for stdin."
    ),
    name: str | None = typer.Option(None, "--name", help="Its name (default: the key's comment)."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Register a public key: tasks of jobs with the ssh plugin submitted from now on accept it."""
    if file == "-":
        text = sys.stdin.read()
    else:
        path = Path(file).expanduser()
        if not path.is_file():
            raise fail(
                f"{file}: no such file (give a public key file, such as ~/.ssh/id_ed25519.pub)"
            )
        text = path.read_text(errors="replace")
    added = client().add_ssh_key(text, name)
    if emit(added, output):
        return
    typer.echo(f"key {added['name']} added ({added['fingerprint']})")


@key_app.command("list")
@api_errors
def list_keys(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Your registered public keys."""
    rows = client().ssh_keys()
    if emit(rows, output):
        return
    cells = [[r["name"], r["fingerprint"], r["public_key"].split()[0]] for r in rows]
    width = None if output is OutputFormat.WIDE else terminal_width()
    typer.echo(table_text(_KEY_COLUMNS, cells, width))


@key_app.command("rm")
@api_errors
def remove_key(
    name: str = typer.Argument(..., help="The key's name (`shoal user key list`)."),
) -> None:
    """Remove a registered key (tasks already running keep it)."""
    client().remove_ssh_key(name)
    typer.echo(f"key {name} removed")


def _task(info: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    tasks = info["tasks"]
    if wanted is not None:
        role, _, index = wanted.partition("/")
        tasks = [t for t in tasks if t["role"] == role and str(t["index"]) == (index or "0")]
        if not tasks:
            known = ", ".join(f"{t['role']}/{t['index']}" for t in info["tasks"]) or "none yet"
            raise fail(f"job {info['job_id']} has no task {wanted}; its tasks: {known}")
    if not tasks:
        raise fail(f"job {info['job_id']} has no task placed yet; try again once it runs")
    task: dict[str, Any] = tasks[0]
    if task["state"] != "RUNNING" or task["port"] is None:
        raise fail(
            f"task {task['role']}/{task['index']} of job {info['job_id']} is {task['state']}: "
            "ssh reaches running tasks only"
        )
    return task


def proxy_command(job: str, task: dict[str, Any]) -> str:
    """This shoal, on the same context, splicing ssh's stdin/stdout to the task's ssh port."""
    argv = [sys.executable, "-m", "shoal"]
    if clientconfig.selected_context is not None:
        argv += ["--context", clientconfig.selected_context]
    argv += ["job", "port-forward", job, "--task", f"{task['role']}/{task['index']}"]
    argv += ["--stdio", "ssh"]
    return shlex.join(argv).replace("%", "%%")  # ssh expands %-tokens in a ProxyCommand


def ssh_argv(job: str, info: dict[str, Any], task: dict[str, Any], known: Path) -> list[str]:
    alias = info["host_key_alias"]
    return [
        "ssh",
        "-o", f"ProxyCommand={proxy_command(job, task)}",
        "-o", f"HostKeyAlias={alias}",
        "-o", f"UserKnownHostsFile={known}",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "UpdateHostKeys=no",
        "-l", info["login"],
        f"{info['job_id']}-{task['role']}-{task['index']}",
    ]  # fmt: skip


@api_errors
def job_ssh(
    job: str = typer.Argument(..., help="Job id or name."),
    task: str | None = typer.Option(None, "--task", help="ROLE/INDEX (default: the first task)."),
    args: list[str] | None = typer.Argument(None, help="After --: ssh options and a command."),
) -> None:
    """Log in to a running task by ssh, through the server (the job needs OpenPAI's ssh plugin
    and one of your keys registered with `shoal user key add` when it was submitted)."""
    if shutil.which("ssh") is None:
        raise fail("the ssh client is not installed here (openssh-client)")
    info = client().job_ssh(job)
    chosen = _task(info, task)
    with tempfile.TemporaryDirectory(prefix="shoal-ssh-") as scratch:
        known = Path(scratch) / "known_hosts"
        known.write_text(f"{info['host_key_alias']} {info['host_public_key']}\n")
        argv = ssh_argv(str(info["job_id"]), info, chosen, known)
        options, command = split_ssh_args(list(args or []))
        ran = subprocess.run([*argv[:-1], *options, argv[-1], *command], check=False)
    raise typer.Exit(ran.returncode)


_VALUED = set("BbcDEeFIiJLlmOopQRSWw")  # ssh's options that take a value


def split_ssh_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``ssh`` options (before the destination) and the remote command (after it)."""
    options: list[str] = []
    position = 0
    while position < len(args) and args[position].startswith("-"):
        option = args[position]
        options.append(option)
        position += 1
        if len(option) == 2 and option[1] in _VALUED and position < len(args):
            options.append(args[position])
            position += 1
    return options, args[position:]
