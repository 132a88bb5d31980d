"""A job submitted from another machine: the submitter's PATH keeps only what exists on the
node (then the node's own PATH), and a HOME missing here is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.agent.environment import fit_to_this_machine


def test_the_submitters_path_keeps_what_exists_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "venv" / "bin"
    here.mkdir(parents=True)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    fitted = fit_to_this_machine(
        {"PATH": f"/Users/alice/.venv/bin:{here}:/usr/bin", "HOME": "/Users/alice", "X": "1"}
    )
    assert fitted["PATH"] == f"{here}:/usr/bin:/bin"
    assert "HOME" not in fitted and fitted["X"] == "1"


def test_on_the_submitters_machine_nothing_changes(tmp_path: Path) -> None:
    inherited = {"PATH": f"{tmp_path}", "HOME": str(tmp_path)}
    fitted = fit_to_this_machine(inherited)
    assert fitted["PATH"].split(":")[0] == str(tmp_path) and fitted["HOME"] == str(tmp_path)
