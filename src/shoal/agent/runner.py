"""Run task attempts as child processes, each in its own session (so its whole process tree can be
signalled), in its own working directory, with stdout and stderr captured to files."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import psutil

from shoal.agent.cache import DATA_DIR, NodeCache
from shoal.agent.ports import BusyPorts, PortTaken, probe
from shoal.protocol import ExitReport, LaunchOrder, RunningReport, fill_in

log = logging.getLogger("shoal.agent")
SHELL = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
PASSED_THROUGH = ("HOME", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "TMPDIR", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
COMMAND_VARIABLE = "SHOAL_COMMAND_WITH_SECRETS"


@dataclass
class Attempt:
    order: LaunchOrder
    workdir: Path
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float | None = None
    deadline: float | None = None  # time.monotonic() when the max runtime runs out
    stop_requested: bool = False  # signalled because the server asked
    agent_shutdown: bool = False  # signalled because this agent is shutting down
    timed_out: bool = False
    term_sent_at: float | None = None
    exit: ExitReport | None = None
    logs_done: bool = False
    usage: dict[str, float] = field(default_factory=dict)
    busy_port: int | None = None  # the launch was refused: this port of the task was taken

    @property
    def attempt_id(self) -> str:
        return self.order.attempt_id

    def log_path(self, stream: str) -> Path:
        return self.log_dir / stream


class Runner:
    def __init__(self, home: Path, cache: NodeCache) -> None:
        self.home = home
        self.cache = cache  # code archives and data sets, by sha256
        self.lock = threading.RLock()
        self.attempts: dict[str, Attempt] = {}
        self.orphan_exits: dict[str, ExitReport] = {}  # kills of attempts never launched here
        self.draining = False  # shutting down: nothing new starts
        self.busy_ports = BusyPorts()

    def known(self) -> list[str]:
        with self.lock:
            return [*self.attempts, *self.orphan_exits]

    # ---- launching ----

    def launch(self, order: LaunchOrder) -> None:
        with self.lock:
            if order.attempt_id in self.attempts:
                return  # a repeated order: this agent already has it
            if self.draining:  # never started: it ends as stopped by this agent's shutdown
                self.orphan_exits.setdefault(
                    order.attempt_id,
                    ExitReport(
                        attempt_id=order.attempt_id,
                        exit_code=None,
                        agent_shutdown=True,
                        finished_at=time.time(),
                    ),
                )
                return
            base = self.home / "work" / order.job_id / f"{order.role}-{order.index}"
            attempt = Attempt(order, base / order.attempt_id, base / f"{order.attempt_id}.logs")
            self.attempts[order.attempt_id] = attempt
        taken = probe(order.ports)  # a listener may have appeared since the placement
        if taken is not None:
            self._refuse(attempt, taken)
            return
        try:
            self._start(attempt)
        except Exception as exc:  # any launch problem is a platform failure, reported as such
            log.warning("launch of %s failed: %s", order.attempt_id, exc)
            self._finish(attempt, None, None, launch_error=str(exc))

    def _refuse(self, attempt: Attempt, taken: PortTaken) -> None:
        log.warning("launch of %s refused: %s", attempt.attempt_id, taken.message())
        self.busy_ports.refused(taken.port)
        attempt.busy_port = taken.port
        self._finish(attempt, None, None, launch_error=taken.message())

    def own_ports(self) -> set[int]:
        """Ports of the attempts this agent runs (or is about to)."""
        with self.lock:
            live = [a.order for a in self.attempts.values() if a.exit is None]
        return {p for order in live for ports in order.ports.values() for p in ports}

    def _start(self, attempt: Attempt) -> None:
        order = attempt.order
        if attempt.workdir.exists():
            shutil.rmtree(attempt.workdir)
        attempt.workdir.mkdir(parents=True)
        attempt.log_dir.mkdir(parents=True, exist_ok=True)
        if order.has_code:
            self.cache.unpack_code(order, attempt.workdir)
        meta = attempt.workdir / ".shoal"
        meta.mkdir(exist_ok=True)
        self.cache.data_dir(order, attempt.workdir)  # $SHOAL_DATA_DIR, fetched first
        (meta / "hostfile").write_text(order.hostfile)
        env = self._environment(order, attempt.workdir)
        argv = _shell_argv(order, env)
        with (
            open(attempt.log_path("stdout"), "wb") as out,
            open(attempt.log_path("stderr"), "wb") as err,
        ):
            cwd = _start_dir(order, attempt.workdir, err)
            attempt.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        attempt.started_at = time.time()
        if order.deadline_s is not None:
            attempt.deadline = time.monotonic() + order.deadline_s

    def _environment(self, order: LaunchOrder, workdir: Path) -> dict[str, str]:
        """The submitter's variables if the job carries them, else the agent's minimal set with
        its own Python first on PATH; then the job's env and the env contract over them."""
        if order.inherited_env is not None:
            env = dict(order.inherited_env)
            env.setdefault("PATH", os.environ.get("PATH", DEFAULT_PATH))
        else:
            env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
            own_bin = str(Path(sys.executable).parent)
            env["PATH"] = f"{own_bin}:{os.environ.get('PATH', DEFAULT_PATH)}"
        env.update(order.env)
        env["SHOAL_HOSTFILE"] = str(workdir / ".shoal" / "hostfile")
        env["SHOAL_WORKDIR"] = str(workdir)
        env["SHOAL_DATA_DIR"] = str(workdir / ".shoal" / DATA_DIR)
        env.setdefault("HOME", str(workdir))
        return env

    # ---- stopping ----

    def kill(self, attempt_id: str, grace: float | None = None) -> None:
        with self.lock:
            attempt = self.attempts.get(attempt_id)
            if attempt is None:
                self.orphan_exits.setdefault(
                    attempt_id,
                    ExitReport(
                        attempt_id=attempt_id,
                        exit_code=None,
                        stop_requested=True,
                        finished_at=time.time(),
                    ),
                )
                return
        if attempt.exit is None and attempt.proc is None:
            self._finish(attempt, None, None, stop=True)
            return
        if attempt.stop_requested or attempt.exit is not None or attempt.agent_shutdown:
            return
        if attempt.proc is not None and attempt.proc.poll() is not None:
            return  # it exited on its own before the kill: the monitor reports its own exit
        attempt.stop_requested = True
        self._terminate(attempt)

    def _terminate(self, attempt: Attempt) -> None:
        if attempt.proc is not None and attempt.term_sent_at is None:
            _signal_group(attempt.proc.pid, signal.SIGTERM)
            attempt.term_sent_at = time.monotonic()

    # ---- watching ----

    def poll(self) -> bool:
        """Reap exits, enforce deadlines and grace periods; True when something exited."""
        changed = False
        now = time.monotonic()
        with self.lock:
            live = [a for a in self.attempts.values() if a.exit is None and a.proc is not None]
        for attempt in live:
            assert attempt.proc is not None
            code = _reap(attempt)
            if code is not None:
                _signal_group(attempt.proc.pid, signal.SIGKILL)  # leftovers of the tree
                signo = -code if code < 0 else None
                self._finish(attempt, None if code < 0 else code, signo)
                changed = True
                continue
            if attempt.deadline is not None and now >= attempt.deadline and not attempt.timed_out:
                attempt.timed_out = True
                self._terminate(attempt)
            grace = attempt.order.kill_grace_s
            if attempt.term_sent_at is not None and now - attempt.term_sent_at >= grace:
                _signal_group(attempt.proc.pid, signal.SIGKILL)
        return changed

    def _finish(
        self,
        attempt: Attempt,
        exit_code: int | None,
        signo: int | None,
        launch_error: str | None = None,
        stop: bool = False,
    ) -> None:
        attempt.exit = ExitReport(
            attempt_id=attempt.attempt_id,
            exit_code=exit_code,
            signal=signo,
            stop_requested=attempt.stop_requested or stop,
            agent_shutdown=attempt.agent_shutdown,
            timed_out=attempt.timed_out,
            launch_error=launch_error,
            busy_port=attempt.busy_port,
            started_at=attempt.started_at,
            finished_at=time.time(),
            usage=dict(attempt.usage),
        )

    def sample_usage(self) -> None:
        with self.lock:
            live = [a for a in self.attempts.values() if a.exit is None and a.proc is not None]
        for attempt in live:
            assert attempt.proc is not None
            attempt.usage = _tree_usage(attempt.proc.pid, attempt.usage)

    # ---- reporting ----

    def running_reports(self) -> list[RunningReport]:
        """Attempts still running, and those that exited but whose exit is not reported yet
        (their logs are still being shipped): the server must not take them for lost."""
        with self.lock:
            return [
                RunningReport(
                    attempt_id=a.attempt_id,
                    pid=a.proc.pid,
                    started_at=a.started_at or time.time(),
                    usage=dict(a.usage),
                )
                for a in self.attempts.values()
                if a.proc is not None and (a.exit is None or not a.logs_done)
            ]

    def exit_reports(self) -> list[ExitReport]:
        """Exits whose logs are all shipped (so a finished task's log is complete)."""
        with self.lock:
            done = [a.exit for a in self.attempts.values() if a.exit is not None and a.logs_done]
            return [*done, *self.orphan_exits.values()]

    def acknowledge(self, attempt_ids: list[str]) -> None:
        with self.lock:
            for attempt_id in attempt_ids:
                self.orphan_exits.pop(attempt_id, None)
                attempt = self.attempts.get(attempt_id)
                if attempt is not None and attempt.exit is not None:
                    del self.attempts[attempt_id]

    def stop_all(self, grace: float) -> None:
        """Stop every task (agent shutdown): SIGTERM, wait up to ``grace``, then SIGKILL. Each
        exit says the agent's shutdown stopped it, unless the process had already exited on its
        own or the server had already asked for the stop."""
        with self.lock:
            self.draining = True
        deadline = time.monotonic() + grace
        while True:
            with self.lock:  # again each round: a launch under way may have started since
                live = [a for a in self.attempts.values() if a.exit is None and a.proc is not None]
            running = [a for a in live if a.proc is not None and a.proc.poll() is None]
            for attempt in running:
                if not (attempt.stop_requested or attempt.timed_out):
                    attempt.agent_shutdown = True
                self._terminate(attempt)
            if not running or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for attempt in live:
            if attempt.proc is not None:
                _signal_group(attempt.proc.pid, signal.SIGKILL)
                attempt.proc.wait()

    def unreported_exits(self) -> list[ExitReport]:
        """Every exit the server has not acknowledged (shipped logs or not)."""
        with self.lock:
            done = [a.exit for a in self.attempts.values() if a.exit is not None]
            return [*done, *self.orphan_exits.values()]

    def restore_exits(self, exits: list[ExitReport]) -> None:
        """Exits a previous run of this agent could not deliver: repeated until acknowledged."""
        with self.lock:
            for report in exits:
                self.orphan_exits.setdefault(report.attempt_id, report)


def _shell_argv(order: LaunchOrder, env: dict[str, str]) -> list[str]:
    """``bash -c COMMAND``. A command with secrets is filled in here and handed to the shell
    through the environment (readable only by the task's own user, unlike the command line that
    ``ps`` shows to everyone) and unset before it runs; it is never stored or logged."""
    if not order.secrets:
        return [SHELL, "-c", order.command]
    env[COMMAND_VARIABLE] = fill_in(order.command, order.secrets)
    return [SHELL, "-c", f'eval "unset {COMMAND_VARIABLE}; ${COMMAND_VARIABLE}"']


def _start_dir(order: LaunchOrder, private: Path, stderr: BinaryIO) -> Path:
    """The directory the job was submitted from, for a job without code, if it exists here;
    otherwise the task's private directory (said on the task's stderr)."""
    if order.workdir is None or order.has_code:
        return private
    wanted = Path(order.workdir)
    if wanted.is_dir():
        return wanted
    stderr.write(
        f"shoal: {wanted}, where the job was submitted from, does not exist on this node; "
        f"the task starts in {private}\n".encode()
    )
    stderr.flush()
    return private


def _signal_group(pid: int, signo: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signo)


def _reap(attempt: Attempt) -> int | None:
    """The exit code if the task's process has exited (``Popen.poll``'s convention), folding
    its final resource use (it and the descendants it waited for) into ``attempt.usage``: a
    task shorter than the sampling period is accounted too."""
    proc = attempt.proc
    assert proc is not None
    if proc.returncode is not None:
        return proc.returncode
    try:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return proc.poll()
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = rusage.ru_utime + rusage.ru_stime
    peak_mib = rusage.ru_maxrss / 1024  # KiB on Linux
    previous = attempt.usage
    attempt.usage = {
        **previous,
        "cpuSeconds": round(max(cpu, previous.get("cpuSeconds", 0.0)), 3),
        "maxRssMiB": round(max(peak_mib, previous.get("maxRssMiB", 0.0)), 1),
    }
    return proc.returncode


def _tree_usage(pid: int, previous: dict[str, float]) -> dict[str, float]:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return previous
    cpu = 0.0
    rss = 0
    for process in processes:
        try:
            times = process.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += process.memory_info().rss
        except psutil.Error:
            continue
    rss_mib = rss / (1 << 20)
    return {
        "cpuSeconds": round(max(cpu, previous.get("cpuSeconds", 0.0)), 3),
        "rssMiB": round(rss_mib, 1),
        "maxRssMiB": round(max(rss_mib, previous.get("maxRssMiB", 0.0)), 1),
        "processes": float(len(processes)),
    }
