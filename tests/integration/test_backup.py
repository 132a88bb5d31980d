"""``shoal admin backup`` under load and ``shoal admin restore`` (docs/backup.md), on a real local
cluster: 4 clients submit 100 jobs each while a backup is taken; after a stop, a restore and a
start, every job acknowledged before the backup began is there, none sent after it ended is,
and the restored server runs queued jobs. Refusals: a plain user's backup (403), a restore
while the server runs, a restore of a damaged file (nothing changed)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx

from shoal.local.supervisor import stop_local
from tests.integration.conftest import LocalCluster, start_cluster

CLIENTS, EACH = 4, 100
AFTER, MOST = 5, 300  # each client also sends AFTER jobs once the backup has ended; never MOST
BLOCKER = (
    "version: 1\nname: blocker\nroles:\n  w:\n    resources: {gpu: 1, cpu: 1}\n"
    "    command: sleep 300\n"
)
QUEUED = (
    "version: 1\nname: q{n}\nroles:\n  w:\n    resources: {{gpu: 1, cpu: 1}}\n"
    "    command: echo ran\n"
)


def shoal_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``shoal --context local ARGS`` with this home (as the machine's admin runs it)."""
    env = {"SHOAL_HOME": str(home), "SHOAL_CONFIG": str(home / "no-config.yaml")}
    env |= {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "shoal", "--context", "local", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


class Load:
    """CLIENTS threads, each submitting EACH jobs with its own httpx client, and on until it has
    sent AFTER once the backup has ended (bounded by MOST); every submission's send and
    acknowledgement times (time.monotonic) are recorded."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.url = cluster.info.url
        self.token = (cluster.home / "admin.token").read_text().strip()
        self.acked: list[tuple[str, float, float]] = []  # job id, sent, acknowledged
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.backup_ended = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(i,)) for i in range(CLIENTS)]

    def client(self, which: int) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as http:
            after = 0
            for n in range(MOST):
                if n >= EACH and after >= AFTER:
                    return
                after += self.backup_ended.is_set()
                body = {"spec": QUEUED.format(n=f"{which}-{n}")}
                sent = time.monotonic()
                answer = http.post("/api/v1/jobs", json=body)
                acked = time.monotonic()
                with self.lock:
                    if answer.status_code == 201:
                        self.acked.append((answer.json()[0]["id"], sent, acked))
                    else:
                        self.errors.append(f"{answer.status_code} {answer.text[:200]}")

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damaged_copy(backup: Path, target: Path) -> None:
    """The backup with bytes of its database changed (the tar itself stays readable)."""
    data = bytearray(backup.read_bytes())
    with tarfile.open(backup) as archive:
        member = archive.getmember("shoal.db")
    middle = member.offset_data + member.size // 2
    data[middle : middle + 64] = b"\xff" * 64
    target.write_bytes(bytes(data))


def test_a_backup_under_load_restores_every_acknowledged_job(tmp_path: Path) -> None:
    home = tmp_path / "shoal-home"
    backup = tmp_path / "backup.tar"
    cluster = start_cluster(home, nodes=1, gpus=1)
    try:
        blocker = cluster.submit(BLOCKER)  # holds the only GPU: the load's jobs all wait
        cluster.wait_for(lambda: cluster.client.job(blocker)["state"] == "RUNNING")
        user = cluster.client.create_user("ann", False, [], None)
        plain = httpx.get(
            f"{cluster.info.url}/api/v1/admin/backup",
            headers={"Authorization": f"Bearer {user['token']}"},
        )
        assert plain.status_code == 403, plain.text

        load = Load(cluster)
        for thread in load.threads:
            thread.start()
        cluster.wait_for(lambda: load.count() >= 100, timeout_s=60)
        began = time.monotonic()
        made = shoal_cli(home, "admin", "backup", str(backup))
        ended = time.monotonic()
        load.backup_ended.set()
        for thread in load.threads:
            thread.join(timeout=120)
        assert made.returncode == 0, made.stderr
        assert not load.errors, load.errors[:3]
        assert shoal_cli(home, "admin", "backup", str(backup)).returncode == 1  # no --force
        while_running = shoal_cli(home, "admin", "restore", str(backup), "--home", str(home))
        assert while_running.returncode == 1 and "a server uses" in while_running.stderr
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)

    before = {job for job, _, acked in load.acked if acked < began}
    after = {job for job, sent, _ in load.acked if sent > ended}
    assert len(before) >= 100 and after, (len(before), len(after))
    backed_up = int(re.search(r"backed up (\d+) jobs", made.stdout).group(1))  # type: ignore[union-attr]

    damaged = tmp_path / "damaged.tar"
    damaged_copy(backup, damaged)
    database = home / "shoal.db"
    unchanged = digest(database)
    refused = shoal_cli(home, "admin", "restore", str(damaged), "--home", str(home))
    assert refused.returncode == 1 and "nothing was changed" in refused.stderr
    assert digest(database) == unchanged
    assert not list(home.glob("shoal.db.before-restore-*"))

    restored = shoal_cli(home, "admin", "restore", str(backup), "--home", str(home))
    assert restored.returncode == 0, restored.stderr
    (kept,) = [
        p for p in home.glob("shoal.db.before-restore-*") if p.name[-4:] not in ("-wal", "-shm")
    ]
    assert f"kept as {kept}" in restored.stdout

    cluster = start_cluster(home, nodes=1, gpus=1)
    try:
        jobs = cluster.client.jobs(limit=10_000)
        ids = {str(job["id"]) for job in jobs}
        assert len(jobs) == backed_up
        assert before <= ids, sorted(before - ids)[:5]
        assert not after & ids, sorted(after & ids)[:5]
        cluster.client.stop(blocker)
        first = min(before, key=int)
        assert cluster.wait(first, timeout_s=60)["state"] == "SUCCEEDED"
        assert "ran" in cluster.output_so_far(first, "w")
    finally:
        cluster.client.close()
        stop_local(home, grace_s=10)
    with tarfile.open(backup) as archive:
        manifest = json.loads(archive.extractfile("shoal-backup.json").read())  # type: ignore[union-attr]
    assert manifest["jobs"] == backed_up and manifest["schemaRevision"]
    print(f"backup: {backed_up} jobs, {backup.stat().st_size} bytes, {ended - began:.2f} s (CLI)")
