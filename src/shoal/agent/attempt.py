"""One task attempt as the agent keeps it: its order, directories, keeper process, stop flags,
usage, cgroup, and how it ended (shoal.agent.runner runs it)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from shoal.agent.cgroups import TaskCgroup
from shoal.agent.journal import SavedAttempt
from shoal.agent.runtimes import TaskSetup
from shoal.protocol import ExitReport, LaunchOrder


@dataclass
class Attempt:
    order: LaunchOrder
    workdir: Path
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None  # the keeper, when it is this agent's child
    pid: int | None = None  # the keeper's pid (and process group), child or adopted
    create_time: float | None = None  # the keeper's, to tell it from a later process of its pid
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
    adopted: bool = False  # started by an earlier run of this agent
    cgroup: TaskCgroup | None = None  # its limits and usage (None: this node limits nothing)
    setup: TaskSetup | None = None  # as launched by this run of the agent
    # a debug task whose command failed (shoal.agent.debug_hold): its exit code, when the hold
    # runs out (time.time()), and whether the hold is being ended
    held_code: int | None = None
    held_until: float | None = None
    released: bool = False

    @property
    def attempt_id(self) -> str:
        return self.order.attempt_id

    def saved(self) -> SavedAttempt:
        deadline_at = None
        if self.deadline is not None:
            deadline_at = time.time() + self.deadline - time.monotonic()
        return SavedAttempt(
            order=self.order.model_copy(update={"secrets": {}}),
            workdir=str(self.workdir),
            log_dir=str(self.log_dir),
            pid=self.pid,
            create_time=self.create_time,
            started_at=self.started_at,
            deadline_at=deadline_at,
            stop_requested=self.stop_requested,
            timed_out=self.timed_out,
            agent_shutdown=self.agent_shutdown,
        )

    def log_path(self, stream: str) -> Path:
        return self.log_dir / stream
