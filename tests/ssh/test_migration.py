"""Migration 0026: the table of users' SSH public keys, up and down."""

from __future__ import annotations

from pathlib import Path

from tests.server.migrations import MigrationSteps


def test_migration_0026_adds_and_drops_the_ssh_keys_table(tmp_path: Path) -> None:
    store = MigrationSteps(tmp_path)
    try:
        store.migrate("upgrade", "0025")
        assert "ssh_keys" not in store.tables()
        store.migrate("upgrade", "0026")
        assert "ssh_keys" in store.tables()
        store.migrate("downgrade", "0025")
        assert "ssh_keys" not in store.tables()
    finally:
        store.close()
