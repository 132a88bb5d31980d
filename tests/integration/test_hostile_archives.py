"""Hostile code archives and data set directories, with real server and agent processes on
loopback: tar slip (``..``), absolute member paths, links to absolute paths or out of the
archive (also through a chain of links), hard links out, FIFOs and devices are refused at
submission with a 4xx naming the member — inline with a job, uploaded as code, pushed as a data
set — and nothing appears outside; setuid and setgid bits are gone once a task unpacks its
code."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal import archives
from shoal.client import ShoalError
from shoal.local.supervisor import stop_local
from tests.integration.conftest import LocalCluster, start_cluster

JOB = "version: 1\nname: {name}\nroles:\n  main:\n    command: {command}\n"
MARKER = "shoal-escape-marker"
Member = tuple[str, bytes, str, int]  # name, tar type, link name, mode


def tar_bytes(*members: Member, gzip: bool = True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzip else "w") as archive:
        for name, kind, link, mode in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, link, mode
            if kind == tarfile.REGTYPE:
                content = b"#!/bin/sh\necho escaped\n"
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
            else:
                archive.addfile(info)
    return buffer.getvalue()


def regular(name: str, mode: int = 0o644) -> Member:
    return (name, tarfile.REGTYPE, "", mode)


def link(name: str, target: str, hard: bool = False) -> Member:
    return (name, tarfile.LNKTYPE if hard else tarfile.SYMTYPE, target, 0o777)


BAD = {
    "dot-dot": ([regular(f"../../../../{MARKER}")], f"../../../../{MARKER}", "'..'"),
    "absolute": ([regular(f"/tmp/{MARKER}")], f"/tmp/{MARKER}", "absolute path"),
    "symlink-absolute": ([link("etc", "/etc")], "etc", "outside the archive"),
    "symlink-out": ([link("up", "../../..")], "up", "outside the archive"),
    "write-through-link": (
        [link("here", "."), link("up", "here/.."), regular(f"up/{MARKER}")],
        "up",
        "outside the archive",
    ),
    "nested-link-out": (
        [("d", tarfile.DIRTYPE, "", 0o755), link("d/l", "../.."), regular(f"d/l/{MARKER}")],
        "d/l",
        "outside the archive",
    ),
    "hardlink-absolute": ([link("shadow", "/etc/shadow", hard=True)], "shadow", "outside"),
    "hardlink-out": ([link("h", "../secret", hard=True)], "h", "outside the archive"),
    "fifo": ([("pipe", tarfile.FIFOTYPE, "", 0o644)], "pipe", "device or FIFO"),
    "char-device": ([("null", tarfile.CHRTYPE, "", 0o666)], "null", "device or FIFO"),
    "block-device": ([("sda", tarfile.BLKTYPE, "", 0o660)], "sda", "device or FIFO"),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    home = tmp_path_factory.mktemp("hostile-archives") / "shoal-home"
    running = start_cluster(home, nodes=1)
    try:
        yield running
    finally:
        running.client.close()
        stop_local(home, grace_s=10)


def no_marker_anywhere(cluster: LocalCluster) -> None:
    root = cluster.home.parent.parent  # every test's temporary directory
    assert not list(root.rglob(f"{MARKER}*"))
    assert not Path(f"/tmp/{MARKER}").exists()


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_code_archive_is_refused_at_submit_naming_the_member(
    cluster: LocalCluster, case: str
) -> None:
    members, named, why = BAD[case]
    body = tar_bytes(regular("ok.sh"), *members)
    jobs_before = len(cluster.client.jobs(all_users=True))
    spec = JOB.format(name=f"bad-{case}", command="sh ok.sh")
    with pytest.raises(ShoalError) as inline:
        cluster.client.submit(spec, code_archive=base64.b64encode(body).decode())
    assert inline.value.status == 400 and inline.value.code == "UnsafeArchive"
    assert repr(named) in inline.value.message and why in inline.value.message
    archive = cluster.home.parent / f"{case}.tar.gz"
    archive.write_bytes(body)
    sha256 = hashlib.sha256(body).hexdigest()
    with pytest.raises(ShoalError) as uploaded:
        cluster.client.upload_code(sha256, archive)
    assert uploaded.value.status == 400 and repr(named) in uploaded.value.message
    with pytest.raises(ShoalError) as by_hash:  # never kept: a submission naming it is refused
        cluster.client.submit(spec, code_hash=sha256)
    assert by_hash.value.code == "NoCodeArchive"
    assert len(cluster.client.jobs(all_users=True)) == jobs_before
    no_marker_anywhere(cluster)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_data_set_directory_is_refused_at_push_naming_the_member(
    cluster: LocalCluster, case: str
) -> None:
    members, named, why = BAD[case]
    body = tar_bytes(regular("ok.csv"), *members, gzip=False)  # as `shoal data push DIR` sends
    source = cluster.home.parent / f"{case}.tar"
    source.write_bytes(body)
    with pytest.raises(ShoalError) as pushed:
        cluster.client.push_data(
            "admin", f"d-{case}", source, "dir", hashlib.sha256(body).hexdigest()
        )
    assert 400 <= pushed.value.status < 500 and repr(named) in pushed.value.message
    assert why in pushed.value.message
    assert all(d["name"] != f"d-{case}" for d in cluster.client.data_sets())
    no_marker_anywhere(cluster)


def test_setuid_and_setgid_bits_are_gone_when_a_task_unpacks_its_code(
    cluster: LocalCluster,
) -> None:
    body = tar_bytes(
        regular("run.sh", mode=0o4755),
        regular("tool", mode=0o6755),
        ("shared", tarfile.DIRTYPE, "", 0o2775),
    )
    spec = JOB.format(name="setid", command="stat -c '%n %a' run.sh tool shared")
    job = cluster.submit(spec, code_archive=base64.b64encode(body).decode())
    assert cluster.wait(job)["state"] == "SUCCEEDED"
    modes = dict(line.split() for line in cluster.log(job, "main").splitlines())
    assert modes == {"run.sh": "755", "tool": "755", "shared": "755"}


def test_a_safe_archive_with_links_inside_still_runs(cluster: LocalCluster) -> None:
    body = tar_bytes(
        ("lib", tarfile.DIRTYPE, "", 0o755),
        regular("lib/run.sh"),
        link("lib64", "lib"),
        link("lib/again", "../lib64/run.sh"),
    )
    job = cluster.submit(
        JOB.format(name="links", command="sh lib64/again"),
        code_archive=base64.b64encode(body).decode(),
    )
    assert cluster.wait(job)["state"] == "SUCCEEDED"
    assert cluster.log(job, "main") == "escaped\n"  # the script's text, run from inside


@pytest.mark.parametrize("case", sorted(BAD))
def test_unpacking_naively_never_writes_outside_the_target(tmp_path: Path, case: str) -> None:
    """The agent's side, as a second wall: even an archive that slipped past the check is
    unpacked with tarfile's ``data`` filter, which refuses it before writing outside."""
    members, _, _ = BAD[case]
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(tar_bytes(*members))
    target = tmp_path / "a" / "b" / "task"
    if case == "absolute" and archives.HAS_FILTERS:  # the filter takes the leading '/' off
        archives.extract(archive, target)
        assert (target / "tmp" / MARKER).is_file()  # it lands inside
    else:
        with pytest.raises((archives.ArchiveError, OSError)):
            archives.extract(archive, target)
    outside = {p for p in tmp_path.rglob("*") if target not in (p, *p.parents)}
    assert outside == {tmp_path / "a", tmp_path / "a" / "b", archive}
    assert not Path(f"/tmp/{MARKER}").exists()
