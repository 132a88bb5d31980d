"""Migration 0028: virtual_clusters.idle_timeout_s, up (a stored VC has none: never) and down."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.server.migrations import MigrationSteps

VC = (
    "INSERT INTO virtual_clusters (name, description, guarantee_gpu, preempt_within, strict_fifo, "
    "members, gpu_by_type, created_at) VALUES ('lab', '', 0, 1, 0, '[]', '{}', 0)"
)


def _row(path: Path) -> dict[str, object]:
    with sqlite3.connect(path) as raw:
        names = [r[1] for r in raw.execute("PRAGMA table_info(virtual_clusters)")]
        row = raw.execute("SELECT * FROM virtual_clusters WHERE name = 'lab'").fetchone()
    return dict(zip(names, row, strict=True))


def test_migration_0028_adds_and_drops_the_idle_timeout_of_vcs(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    try:
        store.migrate("upgrade", "0027")
        with sqlite3.connect(store.path) as raw:
            raw.execute(VC)
        store.migrate("upgrade", "0028")
        assert _row(store.path)["idle_timeout_s"] is None
        store.migrate("downgrade", "0027")
        assert "idle_timeout_s" not in _row(store.path)
    finally:
        store.close()
