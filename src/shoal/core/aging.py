"""Attained-service aging inside a virtual cluster (Tiresias' discretised LAS, Gu et al. NSDI'19).

A VC that switches aging on orders its jobs by how much GPU time they have already had: a job's
priority drops one step each time its attained GPU-seconds (GPUs x run time, over every attempt so
far) cross a threshold. New and short jobs then overtake long ones, and, where the VC allows
preemption within it, a job demoted below a waiting one may be preempted for it.

The rules, which the server and the simulator both apply through ``aged_priority``:
- a job never rises: more service never gives a higher priority;
- a job never leaves its class: the result is at most its own priority, and stays above the next
  class down (levels are at most ``MAX_LEVELS`` = 9 steps of 1, and the classes are 120, 100, 10:
  a demoted ``prod`` job still comes before every ``test`` job), and at least 0, so aging never
  makes a job opportunistic;
- ``oppo`` jobs (negative priority) are not aged: they already come last;
- with ``max_preemptions`` = K, a job that has been preempted K times (for any cause) is no longer
  aged *while it runs*: its running tasks hold its own priority, so no job of its class can
  preempt it inside its VC again. While it waits it stays at its aged level, so the job it was
  preempted for still goes first. Aging then adds at most K preemptions to any job, and a long
  job cannot be stopped over and over by each newer one.

Pure: no clock (the caller says how much service a job has had), no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LAS = "las"
POLICIES = (LAS,)
MAX_LEVELS = 9  # thresholds: one fewer than the gap between `test` (10) and `oppo` (-1)
HOUR_S = 3600.0


class AgingError(ValueError):
    """An aging setting that cannot be used; ``field`` names the part that is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Aging:
    """A VC's aging: the attained GPU-seconds at which its jobs drop one priority step each."""

    thresholds_gpu_s: tuple[float, ...]
    policy: str = LAS
    max_preemptions: int | None = None  # None: aged however often it was preempted

    def __post_init__(self) -> None:
        check_thresholds(self.thresholds_gpu_s, "thresholds_gpu_s")
        if self.policy not in POLICIES:
            raise AgingError("policy", f"{self.policy!r} is not one of: {', '.join(POLICIES)}")
        check_max_preemptions(self.max_preemptions, "max_preemptions")

    @classmethod
    def from_hours(
        cls,
        thresholds_gpu_hours: Sequence[float],
        policy: str = LAS,
        max_preemptions: int | None = None,
    ) -> Aging:
        check_thresholds(thresholds_gpu_hours, "thresholds_gpu_hours")
        hours = tuple(float(h) * HOUR_S for h in thresholds_gpu_hours)
        return cls(hours, policy, max_preemptions)

    @property
    def thresholds_gpu_hours(self) -> tuple[float, ...]:
        return tuple(t / HOUR_S for t in self.thresholds_gpu_s)

    def as_setting(self) -> dict[str, object]:
        """The setting as the API and cluster files write it."""
        return {
            "policy": self.policy,
            "thresholds_gpu_hours": list(self.thresholds_gpu_hours),
            "max_preemptions": self.max_preemptions,
        }


def check_max_preemptions(value: object, field: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AgingError(
            field, f"{value!r}: give a whole number >= 1, or null for no limit (e.g. 2)"
        )


def check_thresholds(values: Sequence[float], field: str) -> None:
    """Raise ``AgingError`` naming ``field`` unless ``values`` is 1..9 increasing positive
    finite numbers."""
    if not values:
        raise AgingError(field, "give at least one threshold, e.g. [1, 10] (GPU-hours)")
    if len(values) > MAX_LEVELS:
        raise AgingError(
            field,
            f"{len(values)} thresholds; at most {MAX_LEVELS} (a job may drop at most "
            f"{MAX_LEVELS} steps, so it never falls into the class below)",
        )
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise AgingError(f"{field}[{index}]", f"{value!r} is not a number")
        if not math.isfinite(value) or value <= 0:
            raise AgingError(f"{field}[{index}]", f"{value} must be a positive finite number")
        if index and value <= values[index - 1]:
            raise AgingError(
                f"{field}[{index}]",
                f"{value} must be larger than the threshold before it ({values[index - 1]}); "
                "list them in increasing order",
            )


def parse_setting(raw: Mapping[str, object] | None, field: str = "aging") -> Aging | None:
    """A setting as written (``{policy: las, thresholds_gpu_hours: [1, 10]}``; None: off)."""
    if raw is None:
        return None
    unknown = sorted(set(raw) - {"policy", "thresholds_gpu_hours", "max_preemptions"})
    if unknown:
        raise AgingError(
            f"{field}.{unknown[0]}",
            "unknown setting; give policy, thresholds_gpu_hours and max_preemptions",
        )
    policy = raw.get("policy", LAS)
    if policy not in POLICIES:
        raise AgingError(f"{field}.policy", f"{policy!r} is not one of: {', '.join(POLICIES)}")
    hours = raw.get("thresholds_gpu_hours")
    if not isinstance(hours, list | tuple):
        raise AgingError(f"{field}.thresholds_gpu_hours", "give a list of GPU-hours, e.g. [1, 10]")
    check_thresholds(tuple(hours), f"{field}.thresholds_gpu_hours")
    most = raw.get("max_preemptions")
    check_max_preemptions(most, f"{field}.max_preemptions")
    assert most is None or isinstance(most, int)
    return Aging.from_hours(tuple(float(h) for h in hours), str(policy), most)


def level(attained_gpu_s: float, aging: Aging) -> int:
    """How many thresholds the job's service has reached (0: none yet)."""
    return bisect.bisect_right(aging.thresholds_gpu_s, attained_gpu_s)


def aged_priority(
    priority: int,
    attained_gpu_s: float,
    aging: Aging | None,
    preemptions: int = 0,
    running: bool = False,
) -> int:
    """The priority the scheduler uses for a job of its own ``priority`` that has had
    ``attained_gpu_s`` GPU-seconds of service and been preempted ``preemptions`` times, in a
    VC with ``aging`` (None: no aging): for its queue entry, or (``running``) for the tasks it
    holds."""
    if aging is None or priority < 0 or (running and protected(aging, preemptions)):
        return priority
    return max(priority - level(attained_gpu_s, aging), min(priority, 0))


def protected(aging: Aging, preemptions: int) -> bool:
    """Whether a job preempted ``preemptions`` times runs at its own priority from now on."""
    return aging.max_preemptions is not None and preemptions >= aging.max_preemptions


def next_threshold(attained_gpu_s: float, aging: Aging) -> float | None:
    """The attained GPU-seconds at which the job drops its next step (None: at the bottom)."""
    index = level(attained_gpu_s, aging)
    return aging.thresholds_gpu_s[index] if index < len(aging.thresholds_gpu_s) else None
