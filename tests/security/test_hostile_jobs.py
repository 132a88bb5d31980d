"""Hostile jobs on a shared node (issue 24, docs/security.md): a cluster of namespace hosts (the
server on one, an agent with two simulated GPUs on the other), two users. Alice runs a victim
task that holds a secret (in a file of its directory, in its environment, in its log) and reads
a data set; Bob runs tests/security/hostile/attack.py on the same node, which tries to act as
the node, switch off its fencing, poison the cache, and reach Alice's task. For both runtimes,
every attempt must be refused, and nothing may have changed: Alice's task still runs, her next
job gets the original bytes, the agent's lease and journal are as the agent left them. Bob
cannot exec into Alice's task either, through the CLI or the WebSocket."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from shoal.agent.limits import instance_name
from shoal.agent.runtimes.container import podman_problem
from shoal.agent.task_users import DEFAULT_UID_BASE
from shoal.agent.workspace import default_task_root
from tests.agent.limits_helpers import cgroups_refused
from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable
from tests.multihost.rack import Rack, as_user

HOSTILE = Path(__file__).parent / "hostile"
PYTHON_IMAGE = "localhost/shoal-test/python:bookworm"  # made by scripts/containers-setup.sh
PROBLEM = namespaces_usable() or cgroups_refused() or (os.geteuid() != 0 and "not root")
pytestmark = pytest.mark.skipif(bool(PROBLEM), reason=f"cannot run this here: {PROBLEM}")
CONTAINERS = podman_problem("podman")
SECRET = "alice-secret-5f0c"
VICTIM_PY = f"""import os, sys, time
open(os.path.join(os.environ["SHOAL_WORKDIR"], "secret.txt"), "w").write("{SECRET}")
print("victim uid", os.getuid(), "secret", os.environ["SECRET_TOKEN"], flush=True)
data = os.path.join(os.environ["SHOAL_DATA_DIR"], "corpus")
print("data", __import__("hashlib").sha256(open(data, "rb").read()).hexdigest(), flush=True)
time.sleep(float(sys.argv[1]))
"""
VICTIM = """\
version: 1
name: {name}
code_dir: {code}
data: [corpus]
runtime: {runtime}
env: {{SECRET_TOKEN: {secret}}}
roles:
  victim:
    {image}
    resources: {{cpu: 0.25, memory: 128Mi, gpu: 1}}
    command: {python} victim.py {seconds}
"""
ATTACKER = """\
version: 1
name: attack
code_dir: {code}
runtime: {runtime}
env: {env}
roles:
  attacker:
    {image}
    resources: {{cpu: 0.25, memory: 128Mi, gpu: 1}}
    command: {python} attack.py
"""
MUST_BE_REFUSED = (
    "read the node key",
    "read the node certificate",
    "write the lease",
    "write the journal",
    "replace the cached code archive",
    "overwrite the cached data file",
    "replace the cached data file",
    "list the victim's directory",
    "read the victim's file",
    "read the victim's log",
    "read the victim's environ",
    "signal the victim",
    "ptrace the victim",
    "open a GPU not given",
    "present the node certificate",
)


def _shoal(rack: Rack, env: dict[str, str], *args: str, timeout: float = 120) -> str:
    done = rack.shoal(*args, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _submit(rack: Rack, env: dict[str, str], spec: Path, text: str, wait: bool = False) -> str:
    spec.write_text(text)
    said = _shoal(rack, env, "job", "submit", str(spec), "-o", "json", *(["--wait"] * wait))
    return str(json.loads(said[said.index("{") :])["id"])


def _rack_with_gpus(make_rack: MakeRack) -> Rack:
    """One agent host whose node has two simulated GPUs (and room for both users' tasks)."""
    rack = make_rack(nodes=1)
    rack.lab.stop(rack.agents.pop("n1"))
    line = rack.join_line("--ttl", "10m")
    host = rack.node_host("n1")
    home = rack.agent_home("n1")
    subprocess.run(["rm", "-rf", str(home)], check=True)
    joined = rack.on_host(
        host, *line, "--name", "n1b", "--address", host.address, "--home", str(home),
        "--cpus", "2", "--memory", "2Gi", "--gpus", "2", "--port-base", "20000",
    )  # fmt: skip
    assert joined.returncode == 0, joined.stdout + joined.stderr
    rack.start_agent("n1")
    rack.wait_state("n1b", "READY", 30)
    return rack


def _gpu_devices(root: Path) -> dict[int, Path]:
    """Simulated GPU device files (NVIDIA's major, minor = index), usable by anyone but for
    the device cgroup."""
    root.mkdir(mode=0o755, exist_ok=True)
    root.chmod(0o755)
    devices = {}
    for index in (0, 1):
        path = root / f"nvidia{index}"
        if not path.exists():
            subprocess.run(["mknod", str(path), "c", "195", str(index)], check=True)
        path.chmod(0o666)
        devices[index] = path
    return devices


def _victim_process(uid: int, marker: str) -> psutil.Process:
    """This test's victim: Alice's uid is the same in every rack (her number in each store), so
    the victim of the test beside it (the other runtime, another pytest worker) is told apart by
    the ``SECRET_TOKEN`` in its environment."""
    wanted = f"SECRET_TOKEN={marker}".encode()
    for process in psutil.process_iter(["uids", "cmdline"]):
        uids, cmdline = process.info["uids"], process.info["cmdline"] or []
        if uids is None or uids.real != uid or not any("victim.py" in a for a in cmdline):
            continue
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as handle:
                if wanted in handle.read().split(b"\0"):
                    return process
        except OSError:
            continue
    raise AssertionError(f"no victim process of uid {uid} with SECRET_TOKEN={marker}")


def _gpus_of(rack: Rack, env: dict[str, str], job_id: str) -> list[int]:
    job = json.loads(_shoal(rack, env, "job", "status", job_id, "-o", "json"))
    (task,) = job["tasks"]
    return [int(g) for g in task.get("gpuIndices", task.get("gpus", []))]


def _outcomes(log: str) -> dict[str, str]:
    found = {}
    for record in _records(log):
        if "attempt" in record:
            found[record["attempt"]] = record["outcome"]
    return found


def _records(log: str) -> list[dict[str, object]]:
    """The JSON lines of a task's log (each after its ``[role/index]`` prefix)."""
    return [json.loads(line[line.index("{") :]) for line in log.splitlines() if "{" in line]


@pytest.mark.parametrize(
    "runtime", ["process", pytest.param("container", marks=pytest.mark.long)]
)  # container: `make test-long`
def test_a_hostile_job_is_refused_everything_and_changes_nothing(
    make_rack: MakeRack, tmp_path: Path, runtime: str
) -> None:
    if runtime == "container" and CONTAINERS is not None:
        pytest.skip(f"podman cannot run containers here: {CONTAINERS}")
    rack = _rack_with_gpus(make_rack)
    alice, bob = as_user(rack, "alice"), as_user(rack, "bob")
    image = f"image: {PYTHON_IMAGE}" if runtime == "container" else ""
    if runtime == "container":  # the admin pushes the image both run
        _shoal(rack, rack.env, "image", "push", PYTHON_IMAGE, timeout=300)

    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(os.urandom(1 << 20))
    original = hashlib.sha256(corpus.read_bytes()).hexdigest()
    _shoal(rack, alice, "data", "push", str(corpus), "corpus")
    code = tmp_path / "victim"
    code.mkdir()
    (code / "victim.py").write_text(VICTIM_PY)
    python = "python3" if runtime == "container" else "/usr/bin/python3"  # any uid runs it
    marker = f"{SECRET}-{runtime}"  # the victim's SECRET_TOKEN: tells this test's victim apart
    fields = {"code": code, "runtime": runtime, "secret": marker, "image": image, "python": python}
    victim_id = _submit(rack, alice, tmp_path / "v.yaml", VICTIM.format(name="victim",
                        seconds=600, **fields))  # fmt: skip
    rack.wait_for(
        lambda: "data" in _shoal(rack, alice, "job", "logs", victim_id), 120, "the victim runs"
    )
    alice_uid = int(
        _shoal(rack, alice, "job", "logs", victim_id).split("victim uid ")[1].split()[0]
    )
    victim = _victim_process(alice_uid, marker)

    home = rack.agent_home("n1")
    task_root = Path(rack.env.get("SHOAL_TASK_ROOT") or default_task_root())
    instance = task_root / instance_name(home)
    (victim_dir,) = (instance / "work" / victim_id / "victim-0").iterdir()
    (victim_log,) = (home / "logs" / victim_id / "victim-0").glob("*/stdout")
    (code_archive,) = (home / "cache" / "code").glob("*.tar.gz")
    data_file = instance / "data" / original
    devices = _gpu_devices(task_root / "gpu-devices")
    victim_gpus = _gpus_of(rack, alice, victim_id)
    other = victim_gpus[0]
    own = 1 - other
    journal_before = sorted(p.name for p in (home / "attempts").iterdir())
    targets = {
        "T_AGENT_HOME": str(home),
        "T_VICTIM_PID": str(victim.pid),
        "T_VICTIM_DIR": str(victim_dir),
        "T_VICTIM_LOG": str(victim_log),
        "T_CODE_ARCHIVE": str(code_archive),
        "T_DATA_FILE": str(data_file),
        "T_OTHER_GPU": str(devices[other]),
        "T_OWN_GPU": str(devices[own]),
        "T_SERVER": rack.url,
    }
    attack_id = _submit(
        rack, bob, tmp_path / "a.yaml",
        ATTACKER.format(code=HOSTILE, runtime=runtime, env=json.dumps(targets), image=image,
                        python=python),
        wait=True,
    )  # fmt: skip
    log = _shoal(rack, bob, "job", "logs", attack_id)
    outcomes = _outcomes(log)
    report = "\n".join(f"{runtime}: {name}: {said}" for name, said in outcomes.items())
    print(report)
    assert set(MUST_BE_REFUSED) <= set(outcomes), log
    done = {name: said for name, said in outcomes.items() if name in MUST_BE_REFUSED
            and not said.startswith("refused")}  # fmt: skip
    assert not done, report
    identity = _records(log)[0]
    assert identity["uid"] not in (0, alice_uid) and identity["uid"] >= DEFAULT_UID_BASE, identity
    assert identity["groups"] in ([], [identity["gid"]]), identity
    if runtime == "process":  # the control: its own GPU passes the device cgroup (no driver)
        assert "No such device" in outcomes["open its own GPU (control)"], report
        assert "Operation not permitted" in outcomes["open a GPU not given"], report

    # nothing changed: the victim runs on, the cache holds the original bytes, the agent's
    # files are its own
    assert victim.is_running() and victim.status() != psutil.STATUS_ZOMBIE
    state = json.loads(_shoal(rack, alice, "job", "status", victim_id, "-o", "json"))["state"]
    assert state == "RUNNING", state
    assert hashlib.sha256(data_file.read_bytes()).hexdigest() == original
    lease = (home / "lease").read_text().strip()  # rewritten by the agent at each report
    assert float(lease) < time.clock_gettime(time.CLOCK_BOOTTIME) + 3600, lease
    journal = sorted(p.name for p in (home / "attempts").iterdir())
    assert "planted.json" not in journal, (journal_before, journal)
    second = _submit(rack, alice, tmp_path / "v2.yaml",
                     VICTIM.format(name="again", seconds=0, **fields), wait=True)  # fmt: skip
    assert f"data {original}" in _shoal(rack, alice, "job", "logs", second)

    # bob cannot exec into alice's task, by the CLI or the WebSocket
    exec_said = rack.shoal("job", "exec", victim_id, "--", "cat", "secret.txt", env=bob)
    assert exec_said.returncode != 0 and SECRET not in exec_said.stdout, exec_said
    assert "alice" in exec_said.stderr or "not" in exec_said.stderr, exec_said.stderr
    _exec_websocket_refused(rack, bob, victim_id)
    _shoal(rack, alice, "job", "stop", victim_id)


def _exec_websocket_refused(rack: Rack, env: dict[str, str], job_id: str) -> None:
    """Bob opens the exec WebSocket of Alice's job himself: refused before anything runs."""
    token = (rack.root / "bob.token").read_text().strip()
    script = (
        "import ssl, sys\n"
        "from websockets.sync.client import connect\n"
        "from websockets.exceptions import InvalidStatus\n"
        "ctx = ssl.create_default_context(cafile=sys.argv[3])\n"
        "url = sys.argv[1].replace('https://', 'wss://') + f'/api/v1/jobs/{sys.argv[2]}/exec'\n"
        "try:\n"
        "    auth = {'Authorization': 'Bearer ' + sys.argv[4]}\n"
        "    with connect(url, ssl=ctx, additional_headers=auth, open_timeout=10) as ws:\n"
        "        print('message', ws.recv(timeout=10))\n"
        "except InvalidStatus as exc:\n"
        "    print('status', exc.response.status_code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, rack.url, job_id, str(rack.ca), token],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert "status 403" in said or "status 404" in said or "Forbidden" in said, said
    assert SECRET not in said
