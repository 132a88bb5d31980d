"""What the crash tests share: how many rounds (``SHOAL_CRASH_ROUNDS``), load in the background,
the errors a round may see, the figures it reports."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.crash.loadgen import TRANSPORT_KINDS, Failure, Load

# The default run: a bounded slice. `make crash` sets SHOAL_CRASH_ROUNDS=10 (the long version).
ROUNDS = int(os.environ.get("SHOAL_CRASH_ROUNDS", "2"))
LONG = ROUNDS > 2
SERVER_SUBMISSIONS = int(os.environ.get("SHOAL_CRASH_SUBMISSIONS", "1000" if LONG else "150"))
AGENT_SUBMISSIONS = int(os.environ.get("SHOAL_CRASH_AGENT_SUBMISSIONS", "300" if LONG else "80"))
CLIENTS = 20
SETTLE_S = 900.0 if LONG else 240.0  # every job final by then
REPORT = os.environ.get("SHOAL_CRASH_REPORT")  # a JSON file the figures are added to
DOWNTIME_SLACK_S = 1.0  # a client backing off sees its last refusal a little after the API is back


def wait_for_progress(load: Load, acknowledged: int) -> None:
    """Until the load has ``acknowledged`` submissions answered 201 (or it ended)."""
    while load.acknowledged() < acknowledged and load.running():
        time.sleep(0.01)


@dataclass
class Window:
    """When the API was down: from a kill to the first successful listing after it."""

    start: float
    end: float


def unexpected(failures: list[Failure], windows: list[Window]) -> list[Failure]:
    """Errors other than a dead server's (refused, dropped, timed out) while it was down."""
    out = []
    for failure in failures:
        expected = failure.kind in TRANSPORT_KINDS and any(
            w.start - 0.05 <= failure.at <= w.end + DOWNTIME_SLACK_S for w in windows
        )
        if not expected:
            out.append(failure)
    return out


@dataclass
class Figures:
    test: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    overall: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        text = json.dumps({"test": self.test, "rounds": self.rounds, "overall": self.overall})
        print(f"\ncrash figures: {text}")
        if REPORT:
            path = Path(REPORT)
            found = json.loads(path.read_text()) if path.exists() else {}
            found[self.test] = {"rounds": self.rounds, "overall": self.overall}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(found, indent=1) + "\n")
