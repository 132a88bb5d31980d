"""Container images as files and rows: archives read (docker-archive, oci-archive) and refused
naming what is missing, image names, and migration 0021 both ways."""

from __future__ import annotations

import gzip
import io
import sqlite3
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config

from shoal.image_archives import ImageNameError, NotAnImage, normalise_name, read_archive
from shoal.store.db import MIGRATIONS, Database, sqlite_url
from tests.image_archives import (
    docker_archive,
    image_id_of,
    layer_and_config,
    oci_archive,
    sha256_of,
)


def test_docker_and_oci_archives_give_the_image_id_and_names(tmp_path: Path) -> None:
    docker = tmp_path / "d.tar"
    docker.write_bytes(docker_archive(("localhost/t/app:1", "localhost/t/app:latest"), b"a"))
    oci = tmp_path / "o.tar"
    oci.write_bytes(oci_archive("localhost/t/app:2", b"a"))
    bare = tmp_path / "bare.tar"
    bare.write_bytes(oci_archive("2", b"a"))  # a bare tag (as skopeo writes) names nothing
    got = read_archive(docker)
    assert (got.format, got.image_id) == ("docker-archive", image_id_of(b"a"))
    assert got.names == ("localhost/t/app:1", "localhost/t/app:latest")
    assert read_archive(oci).image_id == image_id_of(b"a")  # the same config: the same ID
    assert read_archive(oci).names == ("localhost/t/app:2",)
    assert read_archive(bare).names == ()


def _without(source: bytes, drop: str, path: Path) -> Path:
    """``source`` without the members whose name ends with ``drop``."""
    with tarfile.open(fileobj=io.BytesIO(source)) as old, tarfile.open(path, "w") as new:
        for member in old.getmembers():
            if not member.name.endswith(drop):
                new.addfile(member, old.extractfile(member))
    return path


LAYER, CONFIG = layer_and_config(b"c")


@pytest.mark.parametrize(
    ("build", "drop", "named"),
    [
        (docker_archive, "manifest.json", "neither manifest.json"),
        (oci_archive, "index.json", "neither manifest.json"),
        (docker_archive, f"{sha256_of(LAYER)}.tar", f"lacks layer '{sha256_of(LAYER)}.tar'"),
        (docker_archive, f"{sha256_of(CONFIG)}.json", f"has no {sha256_of(CONFIG)}.json"),
        (oci_archive, sha256_of(LAYER), f"lacks layer blobs/sha256/{sha256_of(LAYER)}"),
        (oci_archive, sha256_of(CONFIG), f"has no blobs/sha256/{sha256_of(CONFIG)}"),
    ],
)
def test_an_archive_without_an_image_is_refused_naming_what_is_missing(
    tmp_path: Path, build: Callable[..., bytes], drop: str, named: str
) -> None:
    broken = _without(build(salt=b"c"), drop, tmp_path / "broken.tar")
    with pytest.raises(NotAnImage, match=named):
        read_archive(broken)


def test_a_file_that_is_no_tar_or_compressed_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "not-a-tar.tar"
    text.write_text("hello")
    with pytest.raises(NotAnImage, match="not a tar archive"):
        read_archive(text)
    packed = tmp_path / "image.tar.gz"
    packed.write_bytes(gzip.compress(docker_archive()))  # podman 4.3 cannot load it
    with pytest.raises(NotAnImage, match="compressed, and podman load reads only plain tars"):
        read_archive(packed)


def test_image_names_get_latest_and_refuse_digests_and_bad_shapes() -> None:
    assert normalise_name("busybox") == "busybox:latest"
    assert normalise_name("registry:5000/team/x") == "registry:5000/team/x:latest"
    assert (
        normalise_name("localhost/shoal-test/busybox:local") == "localhost/shoal-test/busybox:local"
    )
    for bad, said in [
        ("team/Trainer", "not an image name"),
        ("a b", "not an image name"),
        ("x@sha256:ab", "digest"),
    ]:
        with pytest.raises(ImageNameError, match=said):
            normalise_name(bad)


@pytest.mark.sqlite_only  # SQLite's batch migration and sqlite_master
def test_migration_0021_adds_and_drops_the_image_tables_and_keeps_the_triggers(
    tmp_path: Path,
) -> None:
    db = Database(sqlite_url(tmp_path))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))

    def migrate(step: str, revision: str) -> None:
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            getattr(command, step)(config, revision)

    def schema() -> tuple[set[str], set[str], int]:
        with sqlite3.connect(tmp_path / "shoal.db") as raw:
            tables = {
                r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            columns = {c[1] for c in raw.execute("PRAGMA table_info(jobs)")}
            (triggers,) = raw.execute(
                "SELECT count(*) FROM sqlite_master WHERE type='trigger' AND tbl_name='jobs'"
            ).fetchone()
        return tables, columns, triggers

    migrate("upgrade", "0021")
    tables, columns, triggers = schema()
    assert {"images", "job_images"} <= tables and "missing_image" in columns and triggers == 3
    migrate("downgrade", "0020")
    tables, columns, triggers = schema()
    assert not {"images", "job_images"} & tables and "missing_image" not in columns
    assert triggers == 3  # a column dropped in place: the jobs table was not copied
    db.dispose()
