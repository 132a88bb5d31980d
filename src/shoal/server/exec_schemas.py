"""The REST bodies of exec sessions' audit log (``GET /api/v1/exec-sessions``,
docs/terminal.md). The sessions themselves are WebSockets, which OpenAPI does not describe."""

from __future__ import annotations

from pydantic import BaseModel, Field

from shoal.store.models import ExecSessionRow


class ExecSessionOut(BaseModel):
    id: str
    user: str = Field(description="Who opened it.")
    job: str
    role: str
    index: int
    attempt: str = Field(description="The task attempt it ran in (TASK_ID.ATTEMPT).")
    node: str
    argv: list[str] = Field(description="The command, as run.")
    tty: bool
    startedAt: float
    endedAt: float | None = Field(None, description="None: still open.")
    durationS: float | None = Field(None, description="None: still open.")
    exitCode: int | None = Field(None, description="The command's, when it exited.")
    endReason: str | None = Field(
        None,
        description="exited, closed-by-user, agent-lost, agent-did-not-attach, "
        "refused-by-agent, server-stopped or server-restarted; None: still open.",
    )

    @classmethod
    def of(cls, row: ExecSessionRow) -> ExecSessionOut:
        ended = row.ended_at
        return cls(
            id=row.id,
            user=row.user,
            job=row.job_id,
            role=row.role,
            index=row.index,
            attempt=row.attempt_id,
            node=row.node,
            argv=[str(a) for a in row.argv],
            tty=row.tty,
            startedAt=row.started_at,
            endedAt=ended,
            durationS=None if ended is None else round(max(0.0, ended - row.started_at), 3),
            exitCode=row.exit_code,
            endReason=row.end_reason,
        )
