"""Agents joined WITHOUT `--address` advertise the address their host reaches the server from, not
127.0.0.1: `join` says which and why, `node list` shows it, and a job spread over two hosts finds
its peers at those addresses in its host lists (issue #24 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.multihost.conftest import MakeRack
from tests.multihost.netns import namespaces_usable

pytestmark = pytest.mark.skipif(
    namespaces_usable() is not None, reason=f"no network namespaces: {namespaces_usable()}"
)

TWO_HOSTS = """\
version: 1
name: where-are-my-peers
roles:
  worker:
    instances: 2
    resources: {cpu: 1, memory: 64Mi}
    command: >-
      env | grep -E '^(SHOAL_WORKER_(HOSTS|ADDRESSES)|SHOAL_HOST_IP|PAI_HOST_IP_worker_[0-9]+)='
      | sort
"""


def test_nodes_joined_without_address_advertise_their_route_to_the_server(
    make_rack: MakeRack, tmp_path: Path
) -> None:
    rack = make_rack(nodes=2, address=False)
    hosts = {node: rack.node_host(node).address for node in ("n1", "n2")}
    for node, address in hosts.items():
        assert address.startswith("198.18.")
        said = " ".join(rack.joined[node].split())
        assert (
            f"advertising {address} (the address this host uses to reach the server; --address "
            "to change it)"
        ) in said, said
    listed = json.loads(rack.shoal("node", "list", "-o", "json").stdout)
    assert {n["name"]: n["address"] for n in listed} == hosts

    spec = tmp_path / "two-hosts.yaml"
    spec.write_text(TWO_HOSTS)
    submitted = rack.shoal("job", "submit", str(spec), "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(json.loads(submitted.stdout)["id"])
    job = rack.admin.wait(job_id, timeout_s=120, poll_s=0.2)
    assert job["state"] == "SUCCEEDED", f"{job}\n{rack.tail_logs()}"
    tasks = {t["index"]: t["node"] for t in rack.admin.job(job_id)["tasks"]}
    assert sorted(tasks.values()) == ["n1", "n2"]  # one core per host: one task on each
    expected = [hosts[tasks[0]], hosts[tasks[1]]]
    for index, node in tasks.items():
        shown = rack.shoal("job", "logs", job_id, "--task", f"worker/{index}")
        assert shown.returncode == 0, shown.stderr
        env = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
        assert env["SHOAL_WORKER_ADDRESSES"] == ",".join(expected), env
        hosts_list = env["SHOAL_WORKER_HOSTS"].split(",")
        assert [h.rsplit(":", 1)[0] for h in hosts_list] == expected, env
        assert env["PAI_HOST_IP_worker_0"] == expected[0]
        assert env["PAI_HOST_IP_worker_1"] == expected[1]
        assert env["SHOAL_HOST_IP"] == hosts[node]
        assert "127.0.0.1" not in shown.stdout
