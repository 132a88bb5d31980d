"""Preemption notices: the agent of a cloud machine reads the machine's Scheduled Events (Azure's
instance metadata, or the local provider's copy of it; docs/cloud.md) and reports a coming
``Preempt`` with its nodes, so the server drains them and requeues their jobs before the cloud
takes the machine back.

``$SHOAL_SCHEDULED_EVENTS_URL`` names the endpoint (the bootstrap exports it); without it the
agent reads nothing. The endpoint is polled every ``POLL_S`` with the ``Metadata: true`` header
Azure requires; a failed read keeps the last answer.
"""

from __future__ import annotations

import email.utils
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

import httpx

from shoal.protocol import PreemptionNotice

ENV = "SHOAL_SCHEDULED_EVENTS_URL"
POLL_S = 2.0
NOTICE_TYPES = frozenset({"Preempt", "Terminate"})
log = logging.getLogger("shoal.agent")


def notice_in(document: Any, names: Iterable[str]) -> PreemptionNotice | None:
    """The first Preempt (or Terminate) event of ``document`` for one of ``names`` (an event
    naming no resource concerns the machine itself), or None."""
    wanted = set(names)
    events = document.get("Events") if isinstance(document, dict) else None
    for event in events or []:
        if not isinstance(event, dict) or event.get("EventType") not in NOTICE_TYPES:
            continue
        resources = event.get("Resources") or []
        if resources and not wanted.intersection(map(str, resources)):
            continue
        return PreemptionNotice(
            event_id=str(event.get("EventId", "")), not_before=_when(event.get("NotBefore"))
        )
    return None


def _when(text: object) -> float | None:
    """Azure's NotBefore: an RFC 1123 time ("Mon, 19 Sep 2016 18:29:47 GMT"); "" when unset."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


class ScheduledEvents:
    """Polls the endpoint in a thread; ``notice`` is the latest notice for the agent's nodes."""

    def __init__(self, url: str, names: list[str], poll_s: float = POLL_S) -> None:
        self.url, self.names, self.poll_s = url, names, poll_s
        self.notice: PreemptionNotice | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-events", daemon=True)

    @classmethod
    def from_env(cls, names: list[str]) -> ScheduledEvents | None:
        url = os.environ.get(ENV, "").strip()
        return cls(url, names) if url else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        with httpx.Client(timeout=5.0, headers={"Metadata": "true"}) as http:
            while not self._stop.is_set():
                self.read_once(http)
                self._stop.wait(self.poll_s)

    def read_once(self, http: httpx.Client) -> None:
        try:
            answer = http.get(self.url)
            answer.raise_for_status()
            found = notice_in(answer.json(), self.names)
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("scheduled events at %s: %s", self.url, exc)
            return
        if found is not None and (self.notice is None or self.notice.event_id != found.event_id):
            log.warning("the machine's cloud will preempt it: event %s", found.event_id)
        self.notice = found
