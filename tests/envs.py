"""Test environments without the developer's shoal settings (``SHOAL_*``), except those the test
run sets for every agent it starts (tests/conftest.py): where tasks' files go and as whom they
run."""

from __future__ import annotations

from collections.abc import Mapping

RUN_WIDE = ("SHOAL_TASK_ROOT", "SHOAL_TASK_USERS")


def is_user_setting(key: str) -> bool:
    """A ``SHOAL_*`` variable a test must not inherit."""
    return key.startswith("SHOAL_") and key not in RUN_WIDE


def without_shoal(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not is_user_setting(k)}
