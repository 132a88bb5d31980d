"""``shoal server install-service`` and ``shoal agent install-service``: systemd unit files that
run ``shoal server start`` and ``shoal agent run`` with this Python (``python -m shoal``) and the
options given, restarted on failure.

The agent's unit keeps its tasks when the agent process dies (``KillMode=process``): every task
runs under a keeper that enforces the agent's lease on its own (docs/cluster.md, "Fencing"), and a
restarted agent adopts the tasks whose keepers still run ("Agent restarts"). A deliberate stop
(``systemctl stop``: SIGTERM to the agent) still ends the tasks, as ``shoal agent run`` does.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from shoal import __version__
from shoal.cli.common import fail
from shoal.cli.render import console, err_console

SYSTEM_UNITS = Path("/etc/systemd/system")
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def systemd_quote(word: str) -> str:
    """One word of an ``ExecStart=`` line as systemd splits it (systemd.service, "Command
    lines"): ``%`` and ``$`` doubled (no specifier or variable expansion), quoted if needed."""
    text = word.replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(word):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shoal_command() -> list[str]:
    """This shoal, by its interpreter's absolute path (a venv's python is kept unresolved: its
    symbolic link is what makes it the venv's)."""
    return [os.path.abspath(sys.executable), "-m", "shoal"]


def exec_start(args: list[str]) -> str:
    return " ".join(systemd_quote(a) for a in [*shoal_command(), *args])


@dataclass(frozen=True)
class Unit:
    name: str  # shoal-server.service
    text: str


def server_unit(home: Path, host: str, port: int, node_timeout: float, kill_grace: float) -> Unit:
    args = ["server", "start", "--home", str(home), "--host", host, "--port", str(port)]
    args += ["--node-timeout", f"{node_timeout:g}", "--kill-grace", f"{kill_grace:g}"]
    text = f"""\
# Written by `shoal server install-service` (shoal {__version__}); docs/cluster.md.
[Unit]
Description=shoal server on https://{host}:{port} (state in {home})
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart={exec_start(args)}
Restart=on-failure
RestartSec=2
# The server's own child (the Kubernetes agent, with --kubernetes) ends with it.
KillMode=control-group
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
"""
    return Unit("shoal-server.service", text)


def agent_unit(home: Path, grace: float) -> Unit:
    args = ["agent", "run", "--home", str(home), "--grace", f"{grace:g}"]
    text = f"""\
# Written by `shoal agent install-service` (shoal {__version__}); docs/cluster.md.
[Unit]
Description=shoal agent (node identity in {home}/identity)
Wants=network-online.target
After=network-online.target
# Never give up restarting it: a machine without its agent is a lost node.
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={exec_start(args)}
Restart=on-failure
RestartSec=2
# Exit status 2: the server removed this node; starting again cannot help (join it again).
RestartPreventExitStatus=2
# KillMode=process: when the agent process dies (a crash, kill -9, the OOM killer), systemd
# leaves its tasks running, each under its keeper, which stops its task by itself once the
# agent's lease runs out (docs/cluster.md, "Fencing"); the agent restarted on the same home
# adopts the tasks whose keepers still run ("Agent restarts"). The default, control-group,
# would kill every task with a dead agent. `systemctl stop` sends SIGTERM to the agent alone,
# and the agent ends its tasks itself (--grace), as `shoal agent run` does on SIGTERM.
KillMode=process
TimeoutStopSec={grace + 30:g}
# The agent makes each task's cgroup (cpu, memory, pids limits) below its own.
Delegate=yes

[Install]
WantedBy=multi-user.target
"""
    return Unit("shoal-agent.service", text)


def install(unit: Unit, output: Path | None, to_stdout: bool, what: str) -> None:
    """Write ``unit`` (to ``output``, a file or a directory, else /etc/systemd/system) or print
    it; then say what was written and the systemctl line that starts it."""
    if to_stdout:
        if output is not None:
            raise fail("give --output or --print, not both")
        typer.echo(unit.text, nl=False)
        return
    target = (output or SYSTEM_UNITS).expanduser()
    if target.is_dir():
        target = target / unit.name
    target = target.absolute()
    if not target.name.endswith(".service"):
        raise fail(f"--output {target}: a unit file's name ends in .service")
    if not target.parent.is_dir():
        where = "no such directory" + (
            " (is systemd installed?)" if target.parent == SYSTEM_UNITS else ""
        )
        raise fail(f"cannot write {target}: {where}; give --output PATH or --print")
    temp = target.with_name(f".{target.name}.tmp")
    try:
        temp.write_text(unit.text, encoding="utf-8")
        temp.chmod(0o644)
        os.replace(temp, target)  # systemd never reads half a unit
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        reason = exc.strerror or str(exc)
        root = "run it as root (sudo), or " if isinstance(exc, PermissionError) else ""
        raise fail(f"cannot write {target}: {reason}; {root}give --output PATH or --print") from exc
    console.print(f"wrote the {what}'s systemd unit {target}:", markup=False, highlight=False)
    for line in unit.text.splitlines():
        if line.startswith("ExecStart="):
            console.print(f"  {line}", markup=False, highlight=False)
    name = target.name if target.parent == SYSTEM_UNITS else str(target)
    console.print("start it now and at every boot with:", markup=False, highlight=False)
    typer.echo(f"systemctl daemon-reload && systemctl enable --now {name}")


def note(text: str) -> None:
    err_console.print(f"note: {text}", markup=False, highlight=False)
