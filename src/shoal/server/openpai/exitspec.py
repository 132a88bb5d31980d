"""OpenPAI's exit spec: what an exit code means (phrase, issuer, causer, type, stage, behavior,
reaction, reason, repro, solution), from ``k8s-job-exit-spec.yaml`` beside this module, a verbatim
copy of OpenPAI's (MIT licence, in its header). shoal's own exit codes for stops, timeouts, lost
nodes and preemption are OpenPAI's (``core.lifecycle.EXIT_CODES``), so they find their entries.

A code the spec does not name falls back as OpenPAI's does: a negative one to the entry of
-8000, a positive one to the entry of 256, each with the raw code shown instead."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

SPEC = Path(__file__).with_name("k8s-job-exit-spec.yaml")
UNDEFINED_NEGATIVE = -8000
UNDEFINED_POSITIVE = 256


@functools.cache
def _entries() -> dict[int, dict[str, Any]]:
    document = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    return {int(entry["code"]): dict(entry) for entry in document["spec"]}


def exit_spec(code: int | None) -> dict[str, Any] | None:
    """The spec entry of exit code ``code`` (None: no code yet)."""
    if code is None:
        return None
    entries = _entries()
    entry = entries.get(code)
    if entry is None:
        entry = entries[UNDEFINED_NEGATIVE if code < 0 else UNDEFINED_POSITIVE]
    return {**entry, "code": code}
