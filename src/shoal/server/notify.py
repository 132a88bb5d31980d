"""Wake-ups between threads: a generation counter under a condition variable."""

from __future__ import annotations

import threading


class Notifier:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the generation moves past ``seen`` or ``timeout`` passes; return it."""
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen, timeout=timeout)
            return self._generation
