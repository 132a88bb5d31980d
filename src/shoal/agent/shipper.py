"""Ship task logs to the server in ordered, offset-tagged chunks (idempotent: the server keeps
what it has and tells us its size, so a lost reply or a restart only causes a resend).

For an attempt adopted from an earlier run of the agent, the first chunk of each stream is empty:
the server answers with how much it has, and shipping goes on from there (no byte sent twice)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

from shoal.agent.attempt import Attempt
from shoal.agent.runner import Runner
from shoal.protocol import LogUpload, LogUploadRequest, LogUploadResponse

CHUNK = 256 * 1024
STREAMS = ("stdout", "stderr")
# The server stored none of what was sent (its disk is full, docs/disk.md): the output stays in
# the task's files here, and shipping pauses this long before it is offered again.
HELD_BACK_WAIT_S = 2.0


class LogShipper:
    def __init__(self, runner: Runner, upload: Callable[[LogUploadRequest], LogUploadResponse]):
        self.runner = runner
        self.upload = upload
        self.shipped: dict[tuple[str, str], int] = {}
        self.held_until = 0.0  # time.monotonic() before which shipping waits

    def ship(self) -> None:
        """Send what is new in every attempt's logs; mark finished attempts fully shipped."""
        if time.monotonic() < self.held_until:
            return
        with self.runner.lock:
            attempts = [a for a in self.runner.attempts.values() if not a.logs_done]
        for _ in range(64):  # bounded: at most 64 rounds of 256 KiB chunks per call
            chunks, finished = self._collect(attempts)
            held_back = bool(chunks)
            if chunks:
                response = self.upload(LogUploadRequest(chunks=chunks))
                for chunk in chunks:
                    key = (chunk.attempt_id, chunk.stream)
                    sent_to = chunk.offset + len(base64.b64decode(chunk.data))
                    # The server's size wins; no size means it does not want this log (stale).
                    size = response.sizes.get(chunk.attempt_id, {}).get(chunk.stream, sent_to)
                    self.shipped[key] = size
                    held_back = held_back and size == chunk.offset and sent_to > size
            if held_back:
                self.held_until = time.monotonic() + HELD_BACK_WAIT_S
                return
            for attempt in finished:
                if all(self._pending(attempt, s) == 0 for s in STREAMS):
                    attempt.logs_done = True
                    for stream in STREAMS:
                        self.shipped.pop((attempt.attempt_id, stream), None)
            if not chunks:
                return

    def _collect(self, attempts: list[Attempt]) -> tuple[list[LogUpload], list[Attempt]]:
        chunks: list[LogUpload] = []
        finished: list[Attempt] = []
        for attempt in attempts:
            done = attempt.exit is not None  # read the exit first: then all output is written
            for stream in STREAMS:
                chunk = self._read(attempt, stream)
                if chunk is not None:
                    chunks.append(chunk)
            if done:
                finished.append(attempt)
        return chunks, finished

    def _pending(self, attempt: Attempt, stream: str) -> int:
        path = attempt.log_path(stream)
        size = path.stat().st_size if path.exists() else 0
        return size - self.shipped.get((attempt.attempt_id, stream), 0)

    def _read(self, attempt: Attempt, stream: str) -> LogUpload | None:
        path = attempt.log_path(stream)
        if not path.exists():
            return None
        key = (attempt.attempt_id, stream)
        if key not in self.shipped and attempt.adopted:
            return LogUpload(attempt_id=attempt.attempt_id, stream=stream, offset=0, data="")
        offset = self.shipped.get(key, 0)
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(CHUNK)
        if not data:
            return None
        return LogUpload(
            attempt_id=attempt.attempt_id,
            stream=stream,
            offset=offset,
            data=base64.b64encode(data).decode(),
            at=time.time(),  # each line's time is its chunk's: within SHIP_EVERY_S of the write
        )
