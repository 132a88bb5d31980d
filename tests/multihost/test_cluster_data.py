"""Data across the network: alice pushes a data set from her machine (the root namespace), a job of
hers on a namespace host reads it at $SHOAL_DATA_DIR; bob can neither pull it nor mount it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack, as_user

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)
READER = """\
version: 1
name: reader
data: [{ref}]
roles:
  r:
    resources: {{cpu: 1, memory: 64Mi}}
    command: sha256sum $SHOAL_DATA_DIR/{ref}/corpus.bin && echo "on $SHOAL_NODE_NAME"
"""


@pytest.fixture
def rack(make_rack: MakeRack) -> Rack:
    return make_rack(nodes=2)


def _shoal_as(rack: Rack, env: dict[str, str], *args: str) -> tuple[int, str]:
    done = rack.shoal(*args, env=env)
    return done.returncode, done.stdout + done.stderr


def test_a_data_set_reaches_a_job_on_another_host_and_no_other_user(
    rack: Rack, tmp_path: Path
) -> None:
    alice, bob = as_user(rack, "alice"), as_user(rack, "bob")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    content = os.urandom(3 << 20)
    (corpus / "corpus.bin").write_bytes(content)
    code, said = _shoal_as(rack, alice, "data", "push", str(corpus), "corpus")
    assert code == 0, said

    spec = tmp_path / "reader.yaml"
    spec.write_text(READER.format(ref="corpus"))
    code, said = _shoal_as(rack, alice, "job", "submit", str(spec), "--wait", "-o", "json")
    assert code == 0, said
    job = json.loads(said[said.index("{") :])
    code, log = _shoal_as(rack, alice, "job", "logs", job["id"])
    assert hashlib.sha256(content).hexdigest() in log, log
    assert "on n1" in log or "on n2" in log, log

    code, said = _shoal_as(rack, bob, "data", "pull", "alice/corpus", str(tmp_path / "stolen"))
    assert code != 0 and "alice/corpus" in said, said
    assert not (tmp_path / "stolen").exists()
    spec.write_text(READER.format(ref="alice/corpus"))
    code, said = _shoal_as(rack, bob, "job", "submit", str(spec))
    assert code != 0 and "alice/corpus" in said, said
    code, said = _shoal_as(rack, bob, "job", "list", "-o", "json")
    assert code == 0, said
    assert not [j for j in json.loads(said) if j["user"] == "bob"], said  # nothing half-made
