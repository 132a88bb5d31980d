"""What the runner tells the server of its attempts (a mixin of ``Runner``): their usage as
last sampled, running and exit reports, acknowledgements, and exits a previous run of the agent
could not deliver (docs/reliability.md)."""

from __future__ import annotations

import threading
import time

from shoal.agent.attempt import Attempt
from shoal.agent.journal import Journal
from shoal.agent.limits import TaskLimiter
from shoal.agent.processes import tree_usage
from shoal.agent.workspace import Workspace
from shoal.protocol import ExitReport, RunningReport


class Reporting:
    """The runner's state this part reads (set by ``Runner.__init__``)."""

    lock: threading.RLock
    attempts: dict[str, Attempt]
    orphan_exits: dict[str, ExitReport]
    limiter: TaskLimiter
    journal: Journal
    workspace: Workspace

    def sample_usage(self) -> None:
        with self.lock:
            live = [a for a in self.attempts.values() if a.exit is None and a.pid is not None]
        for attempt in live:
            assert attempt.pid is not None
            if attempt.cgroup is not None:
                limits = attempt.order.limits
                attempt.usage = self.limiter.usage(attempt.cgroup, limits, attempt.usage)
            else:
                attempt.usage = tree_usage(attempt.pid, attempt.usage)

    def live_usage(self) -> list[tuple[str, str, dict[str, float]]]:
        """(node, attempt id, usage as last sampled) of each attempt still running: what the
        node's metrics (shoal.agent.metrics) add up."""
        with self.lock:
            live = [a for a in self.attempts.values() if a.exit is None and a.pid is not None]
            return [(a.order.node, a.attempt_id, dict(a.usage)) for a in live]

    # ---- reporting ----

    def running_reports(self) -> list[RunningReport]:
        """Attempts still running, and those that exited but whose exit is not reported yet
        (their logs are still being shipped): the server must not take them for lost."""
        with self.lock:
            return [
                RunningReport(
                    attempt_id=a.attempt_id,
                    pid=a.pid,
                    started_at=a.started_at or time.time(),
                    usage=dict(a.usage),
                    epoch=a.order.epoch,
                    held_exit_code=a.held_code if a.exit is None else None,
                    held_until=a.held_until if a.exit is None else None,
                )
                for a in self.attempts.values()
                if a.pid is not None and (a.exit is None or not a.logs_done)
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
                    self.journal.forget(attempt_id)
                    self.workspace.remove_attempt(attempt.workdir, attempt.log_dir)

    def unreported_exits(self) -> list[ExitReport]:
        """Every exit the server has not acknowledged (shipped logs or not)."""
        with self.lock:
            done = [a.exit for a in self.attempts.values() if a.exit is not None]
            return [*done, *self.orphan_exits.values()]

    def restore_exits(self, exits: list[ExitReport]) -> None:
        """Exits a previous run of this agent could not deliver: repeated until acknowledged."""
        with self.lock:
            for report in exits:
                attempt = self.attempts.get(report.attempt_id)
                if attempt is not None and attempt.exit is not None:
                    attempt.exit = report  # as that run saw it end (e.g. its own shutdown)
                elif attempt is None:
                    self.orphan_exits.setdefault(report.attempt_id, report)
