"""Whose uid a task runs under (shoal.agent.task_users), where its files are and who may reach
them (shoal.agent.workspace), and the cache's seals (shoal.agent.cache_integrity)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from shoal.agent import cache_integrity as integrity
from shoal.agent.runtimes import LaunchRefused
from shoal.agent.task_users import DEFAULT_UID_BASE, TaskUser, TaskUsers
from shoal.agent.workspace import Workspace
from shoal.protocol import LaunchOrder

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="switching users needs root")


def _order(owner: str | None = "alice", number: int | None = 7) -> LaunchOrder:
    return LaunchOrder(
        attempt_id="1.1", job_id="1", role="main", index=0, node="n1", command="true", env={},
        hostfile="", has_code=False, kill_grace_s=1, epoch=0, owner=owner, owner_number=number,
    )  # fmt: skip


@as_root
def test_pool_users_get_the_base_plus_their_number_and_no_groups() -> None:
    user = TaskUsers("pool").for_order(_order())
    assert user == TaskUser("alice", DEFAULT_UID_BASE + 7, DEFAULT_UID_BASE + 7)
    argv = user.setpriv_argv()
    assert f"--reuid={DEFAULT_UID_BASE + 7}" in argv and "--clear-groups" in argv
    assert TaskUsers("pool", uid_base=5000).for_order(_order()).uid == 5007  # type: ignore[union-attr]


@as_root
def test_an_order_without_its_owner_is_refused_with_the_fix() -> None:
    with pytest.raises(LaunchRefused, match="older server"):
        TaskUsers("pool").for_order(_order(owner=None))


@as_root
def test_accounts_never_map_to_root_or_a_missing_account() -> None:
    users = TaskUsers("accounts")
    with pytest.raises(LaunchRefused, match="uid 0, below 1000"):
        users.for_order(_order(owner="root"))
    with pytest.raises(LaunchRefused, match="has no account on node n1"):
        users.for_order(_order(owner="no-such-account-3f1"))


def test_the_agent_mode_runs_tasks_as_the_agent() -> None:
    assert TaskUsers("agent").for_order(_order()) is None
    with pytest.raises(ValueError, match="must be one of"):
        TaskUsers("everyone")  # type: ignore[arg-type]


def test_the_environment_chooses_the_mode_and_says_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHOAL_TASK_USERS", "agent")
    assert TaskUsers.default().mode == "agent"
    monkeypatch.setenv("SHOAL_TASK_USERS", "pol")
    with pytest.raises(ValueError, match="SHOAL_TASK_USERS must be one of"):
        TaskUsers.default()
    monkeypatch.setenv("SHOAL_TASK_USERS", "agent")
    monkeypatch.setenv("SHOAL_UID_BASE", "lots")
    with pytest.raises(ValueError, match="SHOAL_UID_BASE must be a number"):
        TaskUsers.default()


def test_can_enter_reads_the_mode_bits_for_owner_group_and_others(tmp_path: Path) -> None:
    top = tmp_path / "top"
    inner = top / "inner"
    inner.mkdir(parents=True)
    mine = os.stat(tmp_path)
    user = TaskUser("x", mine.st_uid, mine.st_gid)
    other = TaskUser("y", 65534, 65534)
    stranger = TaskUser("z", 65534, 65533, groups=(mine.st_gid,))
    tmp_path.chmod(0o711)
    top.chmod(0o711)
    inner.chmod(0o750)
    assert user.can_enter(inner)
    assert not other.can_enter(inner)  # others: no bits
    assert stranger.can_enter(inner)  # its group may read and pass
    top.chmod(0o700)
    assert not stranger.can_enter(inner)  # cannot pass the directory above


@as_root
def test_the_workspace_keeps_the_home_private_and_gives_the_attempt_to_its_user(
    tmp_path: Path,
) -> None:
    home, root = tmp_path / "home", tmp_path / "tasks"
    workspace = Workspace(home, TaskUsers("pool"), root)
    workspace.open()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(workspace.work.stat().st_mode) == 0o711
    workdir, logs = workspace.attempt_paths("1", "main", 0, "1.1")
    assert workdir.is_relative_to(workspace.root) and logs.is_relative_to(home)
    workspace.make_attempt_dir(workdir)
    (workdir / ".shoal").mkdir()
    (workdir / ".shoal" / "hostfile").write_text("n1\n")
    (workdir / "link").symlink_to("/etc/passwd")
    user = TaskUser("alice", DEFAULT_UID_BASE + 7, DEFAULT_UID_BASE + 7)
    workspace.hand_over(workdir, user)
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    for path in (workdir, workdir / ".shoal" / "hostfile"):
        assert (path.stat().st_uid, path.stat().st_gid) == (user.uid, user.gid)
    assert (workdir / "link").lstat().st_uid == user.uid
    assert Path("/etc/passwd").stat().st_uid == 0  # the link's target is left alone
    assert stat.S_IMODE((workdir.parent).stat().st_mode) == 0o711
    logs.mkdir(parents=True)
    workspace.remove_attempt(workdir, logs)
    assert not (workspace.work / "1").exists() and not (home / "logs" / "1").exists()
    workspace.close()
    assert not workspace.root.exists()


def test_a_sealed_data_set_is_intact_until_its_bytes_change(tmp_path: Path) -> None:
    data = tmp_path / "set"
    (data / "sub").mkdir(parents=True)
    (data / "a.bin").write_bytes(b"a" * 1000)
    (data / "sub" / "b.txt").write_text("b")
    seal = tmp_path / "seals" / "set.json"
    integrity.seal(data, seal)
    assert integrity.intact(data, seal, None)
    os.utime(data / "a.bin", (1, 1))  # touched, same bytes: hashed again, still intact
    assert integrity.intact(data, seal, None)
    (data / "sub" / "b.txt").write_text("c")
    assert not integrity.intact(data, seal, None)
    integrity.discard(data, seal)
    assert not data.exists() and not seal.exists()


def test_a_sealed_file_is_checked_against_its_pinned_sha256(tmp_path: Path) -> None:
    data = tmp_path / "file"
    data.write_bytes(b"corpus")
    seal = tmp_path / "file.json"
    integrity.seal(data, seal)
    assert integrity.intact(data, seal, integrity.file_sha256(data))
    data.write_bytes(b"corpsu")
    assert not integrity.intact(data, seal, integrity.file_sha256(tmp_path / "file.json"))
    assert not integrity.intact(tmp_path / "missing", seal, None)


@as_root
def test_an_existing_task_root_keeps_its_own_mode(tmp_path: Path) -> None:
    """A task root an admin points at (``/tmp``, say) is not made 0711: only what shoal makes."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    workspace = Workspace(tmp_path / "home", TaskUsers("pool"), shared)
    workspace.open()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE(workspace.root.stat().st_mode) == 0o711
    workspace.close()
    made = tmp_path / "made" / "tasks"
    Workspace(tmp_path / "home2", TaskUsers("pool"), made).open()
    assert stat.S_IMODE(made.stat().st_mode) == 0o711
