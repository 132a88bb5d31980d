"""Holding a failed debug task (docs/debug-jobs.md): its command runs under a small shell wrapper
that, if the command fails, records its exit code in the task's directory and stays alive
(sleeping), so the task's process group, cgroup and container stay up for ``shoal job exec``.

The agent notices the record (``read_held``), reports the attempt as held, and ends the hold by
sending the task the stop signal (``shoal job release``, or the hold's time running out): the
wrapper then exits with the command's own exit code, or dies of the command's own signal, so the
task ends as it would have without the hold.

The wrapper is POSIX sh (it runs in the role's image too). A stop that comes while the command
runs (``shoal job stop``, a max runtime) is no failure to hold: the wrapper traps the signal,
remembers it, and exits with the command's code without holding. Anything may write the record
file (it lives in the task's own directory), but only the task's own hold is at stake.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from shoal.agent.attempt import Attempt
from shoal.protocol import LaunchOrder

log = logging.getLogger("shoal.agent")

HELD_FILE = "held"  # in the task's .shoal directory: the failed command's exit code
HOLD_SCRIPT = """\
held=$1; shift
stop=
trap 'stop=1' TERM INT
"$@"
code=$?
if [ "$code" -ne 0 ] && [ -z "$stop" ]; then
  echo "shoal: the command exited with code $code; the task is held for debugging" \
"(shoal job exec to look around, shoal job release to end it)" >&2
  echo "$code" > "$held"
  while [ -z "$stop" ]; do sleep 3600 & wait $!; done
  kill $! 2>/dev/null
fi
trap - TERM INT
if [ "$code" -gt 128 ] && [ "$code" -lt 160 ]; then kill -$((code - 128)) $$; fi
exit $code
"""


def held_path(workdir: Path) -> Path:
    """Where a held task's wrapper records its command's exit code."""
    return workdir / ".shoal" / HELD_FILE


def held_argv(argv: list[str], record: Path, shell: str = "/bin/sh") -> list[str]:
    """``argv`` under the hold wrapper, which records a failure's exit code in ``record``."""
    return [shell, "-c", HOLD_SCRIPT, "shoal-hold", str(record), *argv]


def read_held(record: Path) -> tuple[int, float] | None:
    """The failed command's exit code and when it was recorded, once the wrapper wrote it."""
    try:
        text = record.read_text().strip()
        at = os.stat(record).st_mtime
    except OSError:
        return None
    if not text.isdigit():
        return None  # not (fully) written yet
    return int(text), at


def wrap_if_debug(
    order: LaunchOrder, workdir: Path, argv: list[str], shell: str = "/bin/sh"
) -> list[str]:
    """A debug task's command under the hold wrapper; any other's as it is."""
    if order.debug_hold_s is None:
        return argv
    return held_argv(argv, held_path(workdir), shell)


def note_hold(attempt: Attempt) -> bool:
    """Whether the attempt is held: a debug task's wrapper recorded its command's failure (the
    hold runs out ``debug_hold_s`` after that record was written, also for an adopted attempt)."""
    hold_s = attempt.order.debug_hold_s
    if attempt.held_code is not None or hold_s is None:
        return attempt.held_code is not None
    found = read_held(held_path(attempt.workdir))
    if found is None:
        return False
    attempt.held_code, attempt.held_until = found[0], found[1] + hold_s
    log.info("%s exited %s: held for debugging", attempt.attempt_id, attempt.held_code)
    return True
