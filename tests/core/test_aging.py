"""core.aging: a job's scheduling priority never rises with more service, never exceeds its own,
never leaves its class (nor becomes opportunistic), and `oppo` jobs are not aged; settings are
checked with the field named."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.core.aging import (
    MAX_LEVELS,
    Aging,
    AgingError,
    aged_priority,
    level,
    next_threshold,
    parse_setting,
)
from shoal.core.snapshot import OPPORTUNISTIC

CLASSES = (120, 100, 10)  # crit, prod, test (spec/model.py); oppo is -1

agings = st.lists(
    st.floats(0.01, 1e6, allow_nan=False), min_size=1, max_size=MAX_LEVELS, unique=True
).map(lambda hours: Aging.from_hours(sorted(hours)))
services = st.floats(0, 1e12, allow_nan=False)
priorities = st.integers(-1, 200)


@given(agings, priorities, services, services)
def test_more_service_never_raises_the_priority_and_its_own_caps_it(
    aging: Aging, priority: int, a: float, b: float
) -> None:
    less, more = sorted((a, b))
    assert aged_priority(priority, more, aging) <= aged_priority(priority, less, aging)
    assert aged_priority(priority, more, aging) <= priority
    assert aged_priority(priority, 0.0, aging) == priority  # no service yet: its own


@given(agings, st.sampled_from(CLASSES), services)
def test_a_job_never_leaves_its_class(aging: Aging, priority: int, served: float) -> None:
    aged = aged_priority(priority, served, aging)
    below = max((c for c in CLASSES if c < priority), default=OPPORTUNISTIC)
    assert below < aged <= priority
    assert aged >= 0  # never opportunistic


@given(agings, services)
def test_oppo_jobs_and_vcs_without_aging_keep_their_priority(aging: Aging, served: float) -> None:
    assert aged_priority(OPPORTUNISTIC, served, aging) == OPPORTUNISTIC
    assert aged_priority(10, served, None) == 10


@given(agings, priorities, services, services, st.integers(1, 5), st.integers(0, 8))
def test_a_job_preempted_max_preemptions_times_runs_at_its_own_priority(
    aging: Aging, priority: int, a: float, b: float, most: int, preempted: int
) -> None:
    capped = Aging(aging.thresholds_gpu_s, max_preemptions=most)
    less, more = sorted((a, b))
    for running in (False, True):
        assert aged_priority(priority, more, capped, preempted, running) <= aged_priority(
            priority, less, capped, preempted, running
        )
    # waiting, it keeps its level (the job it was preempted for goes first) ...
    assert aged_priority(priority, more, capped, preempted) == aged_priority(priority, more, aging)
    # ... running, it holds its own priority once it was preempted that often
    held = aged_priority(priority, more, capped, preempted, running=True)
    assert held == (priority if preempted >= most else aged_priority(priority, more, aging))


@given(agings, services)
def test_each_threshold_crossed_is_one_step(aging: Aging, served: float) -> None:
    crossed = sum(1 for t in aging.thresholds_gpu_s if served >= t)
    assert level(served, aging) == crossed
    assert aged_priority(100, served, aging) == 100 - crossed
    after = next_threshold(served, aging)
    if after is None:
        assert crossed == len(aging.thresholds_gpu_s)
    else:
        assert after > served and level(after, aging) == crossed + 1


def test_the_steps_at_the_thresholds() -> None:
    aging = Aging.from_hours((1, 10))
    assert [aged_priority(10, h * 3600, aging) for h in (0, 0.99, 1, 9.9, 10, 1e6)] == [
        10,
        10,
        9,
        9,
        8,
        8,
    ]
    assert aging.as_setting() == {
        "policy": "las",
        "thresholds_gpu_hours": [1.0, 10.0],
        "max_preemptions": None,
    }


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"thresholds_gpu_hours": [10, 1]}, "aging.thresholds_gpu_hours[1]", "larger"),
        ({"thresholds_gpu_hours": []}, "aging.thresholds_gpu_hours", "at least one"),
        ({"thresholds_gpu_hours": list(range(1, 11))}, "aging.thresholds_gpu_hours", "at most 9"),
        ({"thresholds_gpu_hours": [1, -2]}, "aging.thresholds_gpu_hours[1]", "positive"),
        ({"thresholds_gpu_hours": [math.inf]}, "aging.thresholds_gpu_hours[0]", "finite"),
        ({"thresholds_gpu_hours": ["1"]}, "aging.thresholds_gpu_hours[0]", "not a number"),
        ({"thresholds_gpu_hours": 1}, "aging.thresholds_gpu_hours", "a list"),
        ({"policy": "srtf", "thresholds_gpu_hours": [1]}, "aging.policy", "las"),
        ({"thresholds_gpu_hours": [1], "level": 2}, "aging.level", "unknown"),
        ({"thresholds_gpu_hours": [1], "max_preemptions": 0}, "aging.max_preemptions", ">= 1"),
        ({"thresholds_gpu_hours": [1], "max_preemptions": 1.5}, "aging.max_preemptions", "whole"),
    ],
)
def test_a_bad_setting_names_its_field(raw: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(AgingError) as caught:
        parse_setting(raw)
    assert caught.value.field == field and words in caught.value.message


def test_settings_parse_and_off() -> None:
    assert parse_setting(None) is None
    parsed = parse_setting({"policy": "las", "thresholds_gpu_hours": [0.5, 2]})
    assert parsed == Aging((1800.0, 7200.0))
    capped = parse_setting({"thresholds_gpu_hours": [1], "max_preemptions": 2})
    assert capped == Aging((3600.0,), max_preemptions=2)
    with pytest.raises(AgingError, match="thresholds_gpu_s"):
        Aging((7200.0, 1800.0))
