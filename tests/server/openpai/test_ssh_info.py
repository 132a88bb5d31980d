"""OpenPAI's ``GET /api/v2/jobs/{job}/ssh`` (docs/ssh.md) against OpenPAI's contract: a job with
the ssh runtime plugin answers its containers and key pair, one without it a 404
``NoJobSshInfoError``, an unknown job a 404 ``NoJobError``."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.server.openpai.test_jobs import JOB, GpuAgent, wait_state

SSH_JOB = (
    JOB
    + """\
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters: {{jobssh: true, sshbarrier: true}}
"""
)


def submit_text(pai: TestClient, text: str) -> None:
    answer = pai.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
    assert answer.status_code == 202, answer.text


def test_a_job_with_the_ssh_plugin_answers_its_containers_and_keys(
    pai: TestClient, pai_home: Path
) -> None:
    agent = GpuAgent(pai, pai_home)
    submit_text(pai, SSH_JOB.format(name="sshd", gpu=0))
    (order,) = agent.launches(1)
    wait_state(pai, "admin~sshd", "RUNNING")
    info = pai.get("/api/v2/jobs/admin~sshd/ssh")
    assert info.status_code == 200, info.text
    (container,) = info.json()["containers"]
    assert container["id"] == order["attempt_id"]
    assert container["sshIp"] == "127.0.0.1"
    assert container["sshPort"] == str(order["ports"]["ssh"][0])
    keys = info.json()["keyPair"]
    assert keys["privateKeyFileName"] == "admin~sshd"
    assert keys["publicKeyFileName"] == "admin~sshd.pub"
    # the link gives the job's private key, which the launch order carries as a secret
    link = keys["privateKeyDirectDownloadLink"].removeprefix("http://testserver")
    private = pai.get(link)
    assert private.status_code == 200
    assert private.text.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert private.text.strip() in order["secrets"].values()
    assert "shoal_ssh_job_key" not in str(pai.get("/api/v2/jobs/admin~sshd/config").text)


def test_a_job_without_the_plugin_and_an_unknown_job_are_404s(
    pai: TestClient, pai_home: Path
) -> None:
    GpuAgent(pai, pai_home)
    submit_text(pai, JOB.format(name="plain", gpu=0))
    none = pai.get("/api/v2/jobs/admin~plain/ssh")
    assert none.status_code == 404
    assert none.json()["code"] == "NoJobSshInfoError"
    assert none.json()["message"] == "SSH info of job admin~plain is not found."
    missing = pai.get("/api/v2/jobs/admin~nope/ssh")
    assert missing.status_code == 404 and missing.json()["code"] == "NoJobError"
