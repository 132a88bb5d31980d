"""A real local cluster whose SHOAL_HOME is a 48 MiB tmpfs the test mounts (docs/disk.md). A
task logs a line every 50 ms throughout. Below the reserve, submissions get 507 StorageFull, the
stored log stops with one marker while the task runs on, reads go on and the database stays
sound; filled to the last byte, writes are 507 or succeed, never 500; with space back, jobs are
accepted and run and the log grows again below its marker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.client import ShoalError
from shoal.local.supervisor import alive, stop_local
from tests.integration.conftest import LocalCluster, start_cluster
from tests.tmpfs import MiB, fill, integrity, mounted_tmpfs

SIZE_MIB = 48
RESERVE = int(SIZE_MIB * MiB * 0.05)  # the default: 5% of the disk (64 MiB is more than it)
MARKER = "[shoal: log paused: "
TALKER = (
    "version: 1\nname: talker\nroles:\n  w:\n    resources: {cpu: 1}\n"
    "    command: i=0; while true; do echo line $i; i=$((i+1)); sleep 0.05; done\n"
)
QUICK = (
    "version: 1\nname: {name}\nroles:\n  w:\n    resources: {{cpu: 1}}\n    command: echo done\n"
)


@pytest.fixture
def disk_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with mounted_tmpfs(tmp_path / "disk", SIZE_MIB) as disk:
        home = disk / "home"
        running = start_cluster(home, nodes=1)
        try:
            yield running
        finally:
            running.client.close()
            stop_local(home, grace_s=10)
            for pid in (running.info.server_pid, running.info.agent_pid):
                assert not alive(pid), f"process {pid} outlived `shoal down`"


def stored_log(cluster: LocalCluster, job: str) -> str:
    return cluster.output_so_far(job, "w")


def test_a_full_home_refuses_with_507_pauses_logs_and_recovers(disk_cluster: LocalCluster) -> None:
    cluster = disk_cluster
    disk, db = cluster.home.parent, cluster.home / "shoal.db"
    talker = cluster.submit(TALKER)
    cluster.wait_for(lambda: "line 5\n" in stored_log(cluster, talker))

    fill(disk / "filler", leave=RESERVE // 2)
    with pytest.raises(ShoalError) as refused:
        cluster.submit(QUICK.format(name="refused"))
    assert refused.value.status == 507 and refused.value.code == "StorageFull"
    assert (
        str(cluster.home) in refused.value.message and "free of 48.0 MiB" in refused.value.message
    )
    cluster.wait_for(
        lambda: stored_log(cluster, talker).rstrip().rsplit("\n", 1)[-1].startswith(MARKER)
    )
    paused = stored_log(cluster, talker)
    time.sleep(1.0)  # the task goes on writing; the stored log does not
    assert stored_log(cluster, talker) == paused and paused.count(MARKER) == 1
    assert cluster.client.job(talker)["state"] == "RUNNING"
    assert [j["name"] for j in cluster.client.jobs()] == ["talker"]
    assert integrity(db) == "ok"

    lease = cluster.home / "agent" / "lease"
    before = float(lease.read_text())
    fill(disk / "filler-2")  # to the last byte: whatever is written is 507 or stored
    # The agent's lease still moves on (written in place), so the keepers do not stop the tasks.
    cluster.wait_for(lambda: float(lease.read_text()) > before + 1, timeout_s=10)
    for attempt in range(3):
        try:
            cluster.client.create_user(f"ann{attempt}", False, [], None)
        except ShoalError as exc:
            assert exc.status == 507 and exc.code == "StorageFull", exc
    assert cluster.client.job(talker)["state"] == "RUNNING"
    assert integrity(db) == "ok"

    (disk / "filler-2").unlink()
    (disk / "filler").unlink()
    quick = cluster.submit(QUICK.format(name="after"))
    assert cluster.wait(quick)["state"] == "SUCCEEDED"
    assert "done" in stored_log(cluster, quick)
    cluster.wait_for(lambda: len(stored_log(cluster, talker)) > len(paused) + 200)
    grown = stored_log(cluster, talker)
    assert grown.startswith(paused) and grown.count(MARKER) == 1
    assert cluster.client.job(talker)["state"] == "RUNNING"
    assert integrity(db) == "ok"
