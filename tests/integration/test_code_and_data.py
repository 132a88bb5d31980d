"""Code and data crossing the network, with real server and agent processes on loopback: the CLI
uploads code once per content, the agent caches it by sha256, data sets round-trip byte for byte
through streamed transfers, a cut-short upload never appears, and tasks read their data sets
under $SHOAL_DATA_DIR (another user cannot)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import typer

from shoal.agent.cache import FetchError, NodeCache
from shoal.archives import build
from shoal.cli.code_upload import build_code_archive
from shoal.client import ShoalClient, ShoalError
from shoal.protocol import DataMount, LaunchOrder
from tests.integration.conftest import LocalCluster, node_data_cache
from tests.integration.test_cli_remote import shoal

CODE_JOB = """\
version: 1
name: {name}
code_dir: .
roles:
  main:
    command: cat keep.txt; ls; test ! -e secret.env && test ! -e cache/big.bin
"""


def use_cli(cluster: LocalCluster) -> None:
    (cluster.home / "server.json").write_text(json.dumps({"url": cluster.info.url}))


def identity(path: Path) -> tuple[int, int]:
    """A cached file's inode and change time: a new download (a new file renamed into place)
    changes both."""
    status = path.stat()
    return status.st_ino, status.st_ctime_ns


def test_code_is_uploaded_once_and_cached_on_the_node(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    use_cli(cluster)
    code = tmp_path / "code"
    (code / "cache").mkdir(parents=True)
    (code / "keep.txt").write_text("kept\n")
    (code / "secret.env").write_text("TOKEN=1\n")
    (code / "cache" / "big.bin").write_bytes(b"0" * 1000)
    (code / ".shoalignore").write_text("*.env\ncache/\n")
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "x.pyc").write_bytes(b"skipped by default")
    (code / "job.yaml").write_text(CODE_JOB.format(name="first"))
    first = shoal(cluster.home, "job", "submit", str(code / "job.yaml"), "--wait")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "code: uploaded" in first.stderr
    listing = cluster.log("1", "main")
    assert listing.startswith("kept\n") and "__pycache__" not in listing
    (code / "job.yaml").write_text(CODE_JOB.format(name="second"))  # the code changed
    (code / "second.yaml").write_text(CODE_JOB.format(name="second"))
    second = shoal(cluster.home, "job", "submit", str(code / "second.yaml"), "--wait")
    assert second.returncode == 0 and "code: uploaded" in second.stderr  # job.yaml changed
    sha = second.stderr.split("sha256 ")[1][:12]
    (cached,) = (cluster.home / "agent" / "cache" / "code").glob(f"{sha}*.tar.gz")
    before = identity(cached)
    third = shoal(cluster.home, "job", "submit", str(code / "second.yaml"), "--name", "third")
    assert third.returncode == 0 and "unchanged, already on the server" in third.stderr
    assert f"sha256 {sha}" in third.stderr
    assert cluster.wait("3")["state"] == "SUCCEEDED"
    assert cluster.log("3", "main").startswith("kept\n")
    assert identity(cached) == before  # the third job's code came from the node's cache
    assert len(list(cached.parent.iterdir())) == 2  # one archive per content


def test_a_code_directory_over_the_limit_names_its_biggest_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.bin").write_bytes(os.urandom(200_000))
    (code / "train.py").write_text("print('hi')\n")
    with pytest.raises(typer.Exit):
        build_code_archive(code, tmp_path / "out.tar.gz", limit=100_000)
    said = " ".join(capsys.readouterr().err.split())
    assert "over the limit of 97.7 KiB" in said
    assert "biggest files: weights.bin (195.3 KiB), train.py (12 B)" in said
    assert ".shoalignore (gitignore syntax)" in said
    (code / ".shoalignore").write_text("*.bin\n")
    built = build_code_archive(code, tmp_path / "out.tar.gz", limit=100_000)
    assert built.files == 2  # train.py and .shoalignore


def test_data_sets_round_trip_through_the_cli(cluster: LocalCluster, tmp_path: Path) -> None:
    use_cli(cluster)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(3_000_001))
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(70_000))
    (tree / "skip.tmp").write_text("ignored\n")
    (tree / ".shoalignore").write_text("*.tmp\n")
    assert shoal(cluster.home, "data", "push", str(blob), "weights").returncode == 0
    pushed = shoal(cluster.home, "data", "push", str(tree), "corpus")
    assert pushed.returncode == 0, pushed.stderr
    again = shoal(cluster.home, "data", "push", str(tree), "corpus")
    assert again.returncode == 1 and "--replace" in again.stderr
    listed = json.loads(shoal(cluster.home, "data", "list", "-o", "json").stdout)
    assert [(d["ref"], d["kind"]) for d in listed] == [
        ("admin/corpus", "dir"),
        ("admin/weights", "file"),
    ]
    out = tmp_path / "out"
    out.mkdir()
    assert shoal(cluster.home, "data", "pull", "weights", str(out / "w.bin")).returncode == 0
    assert (out / "w.bin").read_bytes() == blob.read_bytes()
    assert shoal(cluster.home, "data", "pull", "admin/corpus", str(out)).returncode == 0
    assert (out / "corpus" / "a.txt").read_text() == "alpha\n"
    assert (out / "corpus" / "sub" / "b.bin").read_bytes() == (tree / "sub" / "b.bin").read_bytes()
    assert not (out / "corpus" / "skip.tmp").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no leftovers
    clash = shoal(cluster.home, "data", "pull", "weights", str(out / "w.bin"))
    assert clash.returncode == 1 and "--force" in clash.stderr
    cluster.client.create_user("bob", False, ["vision"], None)
    shared = shoal(cluster.home, "data", "share", "corpus", "--user", "bob", "--group", "vision")
    assert shared.returncode == 0, shared.stderr
    assert "shared with users: bob; groups: vision" in shared.stdout
    table = shoal(cluster.home, "data", "list").stdout
    assert "admin/corpus" in table and "user bob, group vision" in table
    unshared = shoal(cluster.home, "data", "unshare", "corpus", "--user", "bob", "-g", "vision")
    assert unshared.returncode == 0 and "shared with nobody" in unshared.stdout
    nobody = shoal(cluster.home, "data", "share", "corpus", "--user", "nobody")
    assert nobody.returncode == 1 and "no user 'nobody'" in nobody.stderr
    assert shoal(cluster.home, "data", "rm", "weights").returncode == 0
    gone = shoal(cluster.home, "data", "pull", "weights", str(out / "w2.bin"))
    assert gone.returncode == 1 and "no data set admin/weights" in gone.stderr


def high_water_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_transfers_are_streamed_not_held_in_memory(cluster: LocalCluster, tmp_path: Path) -> None:
    """A 96 MiB push and pull leave the server's peak resident memory within 48 MiB of what it
    was: holding the body (or a base64 of it) would raise the peak by 96 MiB at least."""
    size = 96 << 20
    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        for _ in range(size >> 20):
            handle.write(os.urandom(1 << 20))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    server = cluster.info.server_pid
    cluster.client.data_sets()  # the routes have run once
    before = high_water_mib(server)
    pushed = cluster.client.push_data("admin", "big", big, "file", digest)
    assert pushed["size"] == size
    pulled = tmp_path / "pulled.bin"
    with open(pulled, "wb") as sink:
        headers = cluster.client.pull_data("admin", "big", sink)
    assert headers["x-shoal-sha256"] == digest
    assert pulled.stat().st_size == size
    grew = high_water_mib(server) - before
    assert grew < 48, f"the server's peak memory grew by {grew:.0f} MiB for a 96 MiB file"


def test_a_cut_short_upload_never_appears(cluster: LocalCluster) -> None:
    body = os.urandom(4 << 20)
    digest = hashlib.sha256(body).hexdigest()
    url = urlsplit(cluster.info.url)
    token = (cluster.home / "admin.token").read_text().strip()
    head = (
        f"PUT /api/v1/data/admin/partial?sha256={digest}&kind=file HTTP/1.1\r\n"
        f"Host: {url.hostname}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    tmp = cluster.home / "blobs" / "tmp"
    with socket.create_connection((url.hostname, url.port)) as conn:
        conn.sendall(head.encode() + body[: len(body) // 2])
        cluster.wait_for(lambda: tmp.is_dir() and any(tmp.iterdir()))  # it is being written
    # the uploader is gone mid-way (as if killed): the temporary file goes, nothing appears
    cluster.wait_for(lambda: not any(tmp.iterdir()))
    assert cluster.client.data_sets() == []
    with pytest.raises(ShoalError) as missing:
        cluster.client.data_set("admin", "partial")
    assert missing.value.status == 404
    assert not (cluster.home / "blobs" / "sha256" / digest).exists()


DATA_JOB = """\
version: 1
name: {name}
data: [{ref}]
roles:
  reader:
    command: cat "$SHOAL_DATA_DIR/{ref}/notes.txt"; wc -c < "$SHOAL_DATA_DIR/{ref}/sub/w.bin"
"""


def test_a_job_reads_its_data_set_and_another_user_cannot(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    admin = cluster.client
    alice = ShoalClient(cluster.info.url, admin.create_user("alice", False, [], None)["token"])
    bob = ShoalClient(cluster.info.url, admin.create_user("bob", False, [], None)["token"])
    tree = tmp_path / "set"
    (tree / "sub").mkdir(parents=True)
    (tree / "notes.txt").write_text("read me\n")
    (tree / "sub" / "w.bin").write_bytes(b"w" * 12345)
    built = build(tree, tmp_path / "set.tar", compress=False)
    alice.push_data("alice", "notes", built.path, "dir", built.sha256)
    job = alice.submit(DATA_JOB.format(name="reads", ref="notes"))[0]["id"]
    assert cluster.wait(job)["state"] == "SUCCEEDED", cluster.log(job, "reader", 0, "stderr")
    assert cluster.log(job, "reader") == "read me\n12345\n"
    cached = node_data_cache(cluster.home / "agent") / built.sha256 / "notes.txt"
    before = identity(cached)
    with pytest.raises(ShoalError) as refused:
        bob.submit(DATA_JOB.format(name="steals", ref="alice/notes"))
    assert refused.value.status == 404 and "'alice/notes'" in refused.value.message
    with pytest.raises(ShoalError) as hidden:
        bob.pull_data("alice", "notes", open(os.devnull, "wb"))  # noqa: SIM115
    assert hidden.value.status == 404
    assert bob.data_sets() == []
    alice.share_data("alice", "notes", {"users": ["bob"]})
    shared = bob.submit(DATA_JOB.format(name="shared", ref="alice/notes"))[0]["id"]
    assert cluster.wait(shared)["state"] == "SUCCEEDED"
    assert cluster.log(shared, "reader") == "read me\n12345\n"
    assert identity(cached) == before  # the node had it already: nothing was downloaded


def test_a_data_set_that_cannot_be_fetched_fails_the_attempt_naming_it(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    payload = tmp_path / "p.txt"
    payload.write_text("gone soon\n")
    digest = hashlib.sha256(payload.read_bytes()).hexdigest()
    cluster.client.push_data("admin", "lost", payload, "file", digest)
    (cluster.home / "blobs" / "sha256" / digest).unlink()  # the server lost the content
    job = cluster.submit(
        "version: 1\nname: lost\ndata: [lost]\nroles:\n  r:\n"
        "    command: cat $SHOAL_DATA_DIR/lost\n"
    )
    final = cluster.wait(job)
    assert final["state"] == "FAILED"
    (task,) = cluster.client.job(job)["tasks"]
    assert task["exitClass"] == "PLATFORM_FAILURE"
    assert "data set 'lost' could not be fetched" in task["diagnostics"], task["diagnostics"]


def test_the_node_cache_survives_an_interrupted_download(tmp_path: Path) -> None:
    """A download cut short or corrupted is never used: the cache refuses it and keeps nothing."""
    body = b"payload" * 1000
    digest = hashlib.sha256(body).hexdigest()
    calls: list[str] = []

    def cut_short(path: str, sink: object) -> None:
        calls.append(path)
        sink(body[:100])  # type: ignore[operator]
        if len(calls) == 1:
            raise ConnectionError("connection reset")

    cache = NodeCache(tmp_path / "cache", cut_short)
    order = LaunchOrder(
        attempt_id="7.1",
        job_id="7",
        role="r",
        index=0,
        node="n",
        command="true",
        env={},
        hostfile="",
        has_code=False,
        kill_grace_s=1,
        epoch=0,
        data=[DataMount(ref="d", sha256=digest, kind="file", size=len(body))],
    )
    for expected in ("connection reset", "sha256"):
        with pytest.raises(FetchError) as failed:
            cache.data_dir(order, tmp_path / "work")
        assert "data set 'd'" in str(failed.value) and expected in str(failed.value)
    assert not (tmp_path / "cache" / "data" / digest).exists()
    assert list((tmp_path / "cache" / "data" / ".tmp").iterdir()) == []
