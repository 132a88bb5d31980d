"""Run task attempts as child processes, each in its own session (so its whole process tree can be
signalled), in its own working directory, with stdout and stderr captured to files.

Each attempt's first process is its keeper (shoal.agent.keeper), which records the task's exit and
enforces the agent's lease; each attempt is saved under ``HOME/attempts`` (shoal.agent.journal),
so an agent started again on the same home re-adopts the attempts still running (``recover``).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

from shoal.agent.attempt import Attempt
from shoal.agent.cache import NodeCache
from shoal.agent.debug_hold import note_hold, wrap_if_debug
from shoal.agent.environment import (
    contract_environment,
    process_environment,
    shell_argv,
    start_dir,
)
from shoal.agent.exit_message import read_exit_message
from shoal.agent.journal import Found, Journal, create_time_of
from shoal.agent.limits import TaskLimiter, instance_name, oom_verdict
from shoal.agent.ports import BusyPorts, PortTaken, probe
from shoal.agent.processes import (
    Ended,
    adopted_alive,
    ended_from,
    keeper_argv,
    reap_child,
    signal_group,
)
from shoal.agent.reporting import Reporting
from shoal.agent.runtimes import Launch, LaunchRefused, Runtime, TaskSetup
from shoal.agent.runtimes.container import ContainerRuntime, ImageSource, LocalImages
from shoal.agent.runtimes.process import ProcessRuntime, shm_unsupported
from shoal.agent.task_users import TaskUsers
from shoal.agent.workspace import Workspace
from shoal.protocol import ExitReport, LaunchOrder

log = logging.getLogger("shoal.agent")


def default_runtimes(home: Path, images: ImageSource | None = None) -> dict[str, Runtime]:
    """The process runtime, and the container runtime with ``images`` (an agent's: pushed
    images fetched from its server; by default: those already in podman's store)."""
    scratch = home / "podman"
    scratch.mkdir(parents=True, exist_ok=True)
    return {
        "process": ProcessRuntime(shm_unsupported()),
        "container": ContainerRuntime(images or LocalImages(scratch), scratch, instance_name(home)),
    }


class _Stopping(Exception):
    """The agent began to stop before this attempt's keeper started: it is not started."""


class Runner(Reporting):
    def __init__(
        self,
        home: Path,
        cache: NodeCache,
        runtimes: dict[str, Runtime] | None = None,
        limiter: TaskLimiter | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self.home = home
        self.workspace = workspace or Workspace(home, TaskUsers("agent"))
        self.workspace.open()
        self.users = self.workspace.users  # whose identity each task runs under
        self.cache = cache  # code archives and data sets, by sha256
        self.runtimes = runtimes if runtimes is not None else default_runtimes(home)
        self.limiter = limiter if limiter is not None else TaskLimiter(home)
        self.lock = threading.RLock()
        self.attempts: dict[str, Attempt] = {}
        self.orphan_exits: dict[str, ExitReport] = {}  # kills of attempts never launched here
        self.draining = False  # shutting down: nothing new starts
        self._launching = 0  # launches under way: stop_all lets them start or give up first
        self._launched = threading.Condition(self.lock)
        self.busy_ports = BusyPorts()
        self.journal = Journal(home)

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
                        epoch=None,  # never launched
                        finished_at=time.time(),
                    ),
                )
                return
            paths = self.workspace.attempt_paths(order.job_id, order.role, order.index,
                                                 order.attempt_id)  # fmt: skip
            attempt = Attempt(order, *paths)
            self.attempts[order.attempt_id] = attempt
            self.journal.save(attempt.saved())  # before it starts: a restart finds it either way
            self._launching += 1
        try:
            self._launch(attempt)
        finally:
            with self.lock:
                self._launching -= 1
                self._launched.notify_all()

    def _launch(self, attempt: Attempt) -> None:
        taken = probe(attempt.order.ports)  # a listener may have appeared since the placement
        if taken is not None:
            self._refuse(attempt, taken)
            return
        try:
            self._start(attempt)
        except _Stopping:  # the agent began to stop first: nothing of it may stay behind
            attempt.agent_shutdown = True
            self._release(attempt)
            self._finish(attempt, None, None)
        except Exception as exc:  # any launch problem is a platform failure, reported as such
            log.warning("launch of %s failed: %s", attempt.attempt_id, exc)
            self._release(attempt)
            self._finish(attempt, None, None, launch_error=str(exc))

    def _refuse(self, attempt: Attempt, taken: PortTaken) -> None:
        log.warning("launch of %s refused: %s", attempt.attempt_id, taken.message())
        self.busy_ports.refused(taken.port)
        attempt.busy_port = taken.port
        self._finish(attempt, None, None, launch_error=taken.message())

    def recover(self) -> list[str]:
        """Take back the attempts an earlier run of this agent saved: adopt those still running,
        and hold the exits of the others for reporting. Returns the attempt ids found."""
        found: list[str] = []
        for saved in self.journal.load_all():
            attempt = Attempt(
                saved.order,
                Path(saved.workdir),
                Path(saved.log_dir),
                pid=saved.pid,
                create_time=saved.create_time,
                started_at=saved.started_at,
                stop_requested=saved.stop_requested,
                timed_out=saved.timed_out,
                agent_shutdown=saved.agent_shutdown,
                adopted=True,
            )
            if saved.deadline_at is not None:
                attempt.deadline = time.monotonic() + saved.deadline_at - time.time()
            attempt.cgroup = self.limiter.find(self.journal.dir(saved.order.attempt_id))
            state = self.journal.find(saved)
            attempt.pid, attempt.create_time = saved.pid, saved.create_time
            if state is Found.RUNNING:
                log.info("adopted %s (pid %s)", attempt.attempt_id, saved.pid)
            elif state is Found.EXITED or saved.pid is not None:
                record = self.journal.exit_record(attempt.attempt_id)
                if record is None and saved.pid is not None:  # the keeper died, its task may not:
                    signal_group(saved.pid, signal.SIGKILL)  # nothing would fence it any more
                self._finish_with(attempt, ended_from(record, None, {}))
            else:  # never started: its cgroup (and a container) may have been made already
                self._release(attempt)
                self._finish(attempt, None, None, launch_error="its agent stopped as it launched")
            with self.lock:
                self.attempts[attempt.attempt_id] = attempt
            found.append(attempt.attempt_id)
        self._remove_strays()
        return found

    def _remove_strays(self) -> None:
        """Remove the containers of this agent's attempts that no longer run: those whose
        start was cut short with everything of it killed (the agent, the keeper's group and the
        shim's guard), created after anyone could remove them."""
        with self.lock:
            running = {i for i, a in self.attempts.items() if a.exit is None}
        for runtime in self.runtimes.values():
            if not isinstance(runtime, ContainerRuntime):
                continue
            try:
                removed = runtime.remove_strays(running)
            except Exception as exc:  # the agent starts all the same
                log.warning("could not look for containers left behind: %s", exc)
                continue
            if removed:
                log.info("removed containers of attempts no longer running: %s", removed)

    def alive(self, attempt_ids: list[str]) -> list[str]:
        """Those of ``attempt_ids`` whose processes have not ended yet: not reaped, or whose
        keeper still lives (it records the end before it is gone)."""
        with self.lock:
            known = [self.attempts[i] for i in attempt_ids if i in self.attempts]
        return [a.attempt_id for a in known if a.exit is None or self._running(a)]

    def own_ports(self) -> set[int]:
        """Ports of the attempts this agent runs (or is about to)."""
        with self.lock:
            live = [a.order for a in self.attempts.values() if a.exit is None]
        return {p for order in live for ports in order.ports.values() for p in ports}

    def _start(self, attempt: Attempt) -> None:
        order = attempt.order
        runtime = self.runtimes.get(order.runtime)
        if runtime is None:
            raise LaunchRefused(f"this agent has no {order.runtime} runtime")
        user = self.users.for_order(order)  # LaunchRefused: no identity for it here
        self.workspace.make_attempt_dir(attempt.workdir)
        attempt.log_dir.mkdir(parents=True, exist_ok=True)
        if order.has_code:
            self.cache.unpack_code(order, attempt.workdir)
        meta = attempt.workdir / ".shoal"
        meta.mkdir(exist_ok=True)
        self.cache.data_dir(order, attempt.workdir)  # $SHOAL_DATA_DIR, fetched first
        (meta / "hostfile").write_text(order.hostfile)
        self.workspace.hand_over(attempt.workdir, user)
        if order.runtime == "process":
            env = process_environment(order, attempt.workdir, user)
        else:
            env = contract_environment(order, attempt.workdir, user)
        attempt_dir = self.journal.dir(attempt.attempt_id)
        if order.limits is not None:
            attempt.cgroup = self.limiter.create(attempt.attempt_id, order.limits, attempt_dir)
        with (
            open(attempt.log_path("stdout"), "wb") as out,
            open(attempt.log_path("stderr"), "wb") as err,
        ):
            err.write(self.limiter.notice(order.limits, runtime.refused_limits()).encode())
            err.flush()
            attempt.setup = TaskSetup(
                order=order,
                workdir=attempt.workdir,
                start_dir=start_dir(order, attempt.workdir, err, user),
                attempt_dir=attempt_dir,
                env=env,
                shell_argv=wrap_if_debug(order, attempt.workdir, shell_argv(order, env)),
                cgroup=attempt.cgroup,
                data_root=self.cache.data_root,
                user=user,
            )
            launch = runtime.prepare(attempt.setup)
            grace, lease = order.kill_grace_s, self.journal.lease_path
            with self.lock:  # a keeper started once stop_all has looked would outlive the agent
                if self.draining:
                    raise _Stopping
                attempt.proc = subprocess.Popen(
                    keeper_argv(attempt_dir, lease, grace, launch.argv, launch.join),
                    cwd=launch.cwd,
                    env=launch.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
                attempt.pid = attempt.proc.pid
        attempt.started_at = time.time()
        attempt.create_time = create_time_of(attempt.pid)
        if order.deadline_s is not None:
            attempt.deadline = time.monotonic() + order.deadline_s
        self.journal.save(attempt.saved())

    def exec_launch(self, attempt_id: str, argv: list[str], tty: bool = False) -> Launch:
        """How to run ``argv`` in a running task's environment (its node, directory, env, cgroup
        and container): for ``shoal job exec`` and the dashboard's terminal."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
        if attempt is None or attempt.exit is not None or attempt.setup is None:
            raise LaunchRefused(f"task attempt {attempt_id} is not running on this agent")
        runtime = self.runtimes[attempt.order.runtime]
        return runtime.exec_argv(attempt.setup, argv, tty)

    def running_order(self, attempt_id: str) -> LaunchOrder | None:
        """The order of an attempt running here (None: not here, or ended): what a tunnel to
        one of its ports checks."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
        return attempt.order if attempt is not None and attempt.exit is None else None

    def unsupported(self) -> dict[str, str]:
        """What this node cannot do, with why: runtimes and limits (the node reports it)."""
        found = dict(self.limiter.unsupported)
        for name, runtime in self.runtimes.items():
            problem = runtime.unavailable()
            if problem is not None:
                found[name] = problem
            found.update(runtime.refused_limits())
        return found

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
                        epoch=None,  # never launched here, under no epoch
                        finished_at=time.time(),
                    ),
                )
                return
        if attempt.exit is None and attempt.pid is None:
            self._finish(attempt, None, None, stop=True)
            return
        if attempt.stop_requested or attempt.exit is not None or attempt.agent_shutdown:
            return
        if not self._running(attempt):
            return  # it exited on its own before the kill: the monitor reports its own exit
        if note_hold(attempt):
            self.release(attempt_id)  # its command has ended already: it ends as it did
            return
        attempt.stop_requested = True
        self._save(attempt)
        self._terminate(attempt)

    def release(self, attempt_id: str) -> None:
        """End a held attempt's hold (docs/debug-jobs.md): its wrapper is told to stop and exits
        with its command's own exit code, which is what the attempt reports."""
        with self.lock:
            attempt = self.attempts.get(attempt_id)
        if attempt is None or attempt.held_code is None or attempt.released:
            return
        attempt.released = True
        log.info("hold of %s ends (exit code %s)", attempt_id, attempt.held_code)
        self._terminate(attempt)

    def _save(self, attempt: Attempt) -> None:
        if self.journal.dir(attempt.attempt_id).is_dir():
            self.journal.save(attempt.saved())

    def _running(self, attempt: Attempt) -> bool:
        if attempt.proc is not None:
            return attempt.proc.poll() is None
        return attempt.pid is not None and adopted_alive(attempt.pid, attempt.create_time)

    def _terminate(self, attempt: Attempt) -> None:
        if attempt.pid is not None and attempt.term_sent_at is None:
            signal_group(attempt.pid, signal.SIGTERM)
            attempt.term_sent_at = time.monotonic()

    # ---- watching ----

    def poll(self) -> bool:
        """Reap exits, enforce deadlines and grace periods; True when something exited."""
        changed = False
        now = time.monotonic()
        with self.lock:
            live = [a for a in self.attempts.values() if a.exit is None and a.pid is not None]
        for attempt in live:
            assert attempt.pid is not None
            ended = self._ended(attempt)
            if ended is not None:
                signal_group(attempt.pid, signal.SIGKILL)  # leftovers of the tree
                self._finish_with(attempt, ended)
                changed = True
                continue
            if note_hold(attempt):
                assert attempt.held_until is not None
                if time.time() >= attempt.held_until:
                    self.release(attempt.attempt_id)  # the hold ran out
            elif attempt.deadline is not None and now >= attempt.deadline and not attempt.timed_out:
                attempt.timed_out = True
                self._save(attempt)
                self._terminate(attempt)
            grace = attempt.order.kill_grace_s
            if attempt.term_sent_at is not None and now - attempt.term_sent_at >= grace:
                self._kill_hard(attempt)
        return changed

    def _kill_hard(self, attempt: Attempt) -> None:
        """SIGKILL the task's process group and everything in its cgroup (a container's
        processes are not in the group)."""
        if attempt.pid is not None:
            signal_group(attempt.pid, signal.SIGKILL)
        if attempt.cgroup is not None:
            attempt.cgroup.kill_all()

    def _ended(self, attempt: Attempt) -> Ended | None:
        """How the attempt ended, once its keeper has ended (a child) or written its record
        (adopted: not this agent's child, so it is never waited for here)."""
        if attempt.proc is not None:
            status = reap_child(attempt.proc)
            if status is None:
                return None
            return ended_from(self.journal.exit_record(attempt.attempt_id), status, attempt.usage)
        assert attempt.pid is not None
        record = self.journal.exit_record(attempt.attempt_id)
        if record is None and adopted_alive(attempt.pid, attempt.create_time):
            return None
        return ended_from(record, None, attempt.usage)

    def _finish_with(self, attempt: Attempt, ended: Ended) -> None:
        """Record how the attempt ended, with its cgroup's last figures (peak memory, CPU time,
        OOM kills), then end whatever it left behind."""
        usage, exit_code, signo = ended.usage, ended.exit_code, ended.signal
        runtime = self.runtimes.get(attempt.order.runtime)
        launch_error = None
        stopped = attempt.stop_requested or attempt.timed_out or attempt.agent_shutdown
        if runtime is not None and not stopped:  # a stop while it started is a stop
            launch_error = runtime.launch_error(self.journal.dir(attempt.attempt_id))
        translated = runtime.exit_signal(exit_code) if runtime and exit_code is not None else None
        if translated is not None:
            exit_code, signo = None, translated
        if attempt.cgroup is not None:
            usage = self.limiter.usage(attempt.cgroup, attempt.order.limits, usage)
        attempt.usage = usage
        oom_killed, oom_kills = oom_verdict(usage, exit_code, signo)
        self._release(attempt)
        if launch_error is not None:
            self._finish(attempt, None, None, launch_error=launch_error)
            return
        self._finish(
            attempt,
            exit_code,
            signo,
            fenced=ended.fenced,
            oom=(oom_killed, oom_kills),
            message=read_exit_message(attempt.workdir) if exit_code != 0 else None,
        )

    def _release(self, attempt: Attempt) -> None:
        """End what the attempt left outside its process group (a container, a process in its
        cgroup) and remove its cgroup."""
        runtime = self.runtimes.get(attempt.order.runtime)
        if runtime is not None:
            try:
                runtime.cleanup(attempt.attempt_id)
            except Exception as exc:  # cleanup must not stop the exit from being reported
                log.warning("cleanup of %s failed: %s", attempt.attempt_id, exc)
        if attempt.cgroup is not None:
            self.limiter.release(attempt.cgroup)

    def _finish(
        self,
        attempt: Attempt,
        exit_code: int | None,
        signo: int | None,
        launch_error: str | None = None,
        stop: bool = False,
        fenced: bool = False,
        oom: tuple[bool, int] = (False, 0),
        message: str | None = None,
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
            fenced=fenced,
            epoch=attempt.order.epoch,
            started_at=attempt.started_at,
            finished_at=time.time(),
            usage=dict(attempt.usage),
            oom_killed=oom[0],
            oom_kills=oom[1],
            message=message,
        )

    def stop_all(self, grace: float) -> None:
        """Stop every task (agent shutdown): SIGTERM, wait up to ``grace``, then SIGKILL. Each
        exit says the agent's shutdown stopped it, unless the process had already exited on its
        own or the server had already asked for the stop. A launch under way either starts its
        keeper first (and is stopped with the rest) or gives up, its cgroup removed: no keeper
        starts once the agent may be gone (it would be fenced, its container left behind)."""
        deadline = time.monotonic() + grace
        with self.lock:
            self.draining = True  # launches under way now start (and are stopped) or give up
            self._launched.wait_for(lambda: self._launching == 0, timeout=grace)
        while True:
            with self.lock:  # again each round: a launch under way may have started since
                live = [a for a in self.attempts.values() if a.exit is None and a.pid is not None]
            running = [a for a in live if self._running(a)]
            for attempt in running:
                if not (attempt.stop_requested or attempt.timed_out or attempt.agent_shutdown):
                    attempt.agent_shutdown = True
                    self._save(attempt)
                self._terminate(attempt)
            if not running or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for attempt in live:
            self._kill_hard(attempt)
            if attempt.proc is not None:
                attempt.proc.wait()
            elif attempt.pid is not None:
                while adopted_alive(attempt.pid, attempt.create_time):
                    time.sleep(0.01)
            self._release(attempt)  # a container being started, the cgroup: nothing outlives it
