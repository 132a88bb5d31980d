"""Migration 0027: jobs.shares, up (a stored job gets no shares) and down."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.server.migrations import MigrationSteps

JOB = (
    "INSERT INTO jobs (id, seq, name, user, virtual_cluster, state, version, priority, "
    "priority_class, submitted_at, attempt, job_retry_count, source_format, source_text, spec, "
    "secrets, has_code, stop_requested, diagnostics) VALUES ('1', 1, 'nb', 'alice', 'default', "
    "'RUNNING', 1, 0, 'normal', 0, 1, 0, 'native', '', '{}', '{}', 0, 0, '')"
)


def _columns(path: Path) -> dict[str, object]:
    with sqlite3.connect(path) as raw:
        names = [r[1] for r in raw.execute("PRAGMA table_info(jobs)")]
        row = raw.execute("SELECT * FROM jobs WHERE id = '1'").fetchone()
    return dict(zip(names, row, strict=True))


def test_migration_0027_adds_and_drops_the_shares_of_jobs(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    try:
        store.migrate("upgrade", "0026")
        with sqlite3.connect(store.path) as raw:
            raw.execute(JOB)
        assert "shares" not in _columns(store.path)
        store.migrate("upgrade", "0027")
        assert _columns(store.path)["shares"] == "{}"
        store.migrate("downgrade", "0026")
        kept = _columns(store.path)
        assert "shares" not in kept and kept["name"] == "nb"
    finally:
        store.close()
