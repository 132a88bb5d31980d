"""Debug roles (docs/debug-jobs.md): native ``debug``/``debug_hold``, OpenPAI's ``isDebug`` (v2
under ``extras.jobEnvs``, v1 in ``jobEnvs``)."""

from __future__ import annotations

import json

import pytest

from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_text

NATIVE = "version: 1\nname: d\nroles:\n  main:\n    command: 'false'\n{extra}"
PAI_V2 = """\
protocolVersion: 2
name: d
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
taskRoles:
  worker:
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    commands: ['false']
extras:
  jobEnvs: {envs}
"""


def test_a_native_role_is_held_for_its_own_time_or_the_servers() -> None:
    (job,) = load_job_text(NATIVE.format(extra="    debug: true\n    debug_hold: 2h\n"), {}).jobs
    assert (job.roles[0].debug, job.roles[0].debug_hold_s) == (True, 7200)
    (plain,) = load_job_text(NATIVE.format(extra="    debug: true\n"), {}).jobs
    assert (plain.roles[0].debug, plain.roles[0].debug_hold_s) == (True, None)
    (off,) = load_job_text(NATIVE.format(extra=""), {}).jobs
    assert (off.roles[0].debug, off.roles[0].debug_hold_s) == (False, None)


def test_a_hold_without_debug_is_warned_and_a_bad_one_refused() -> None:
    loaded = load_job_text(NATIVE.format(extra="    debug_hold: 2h\n"), {})
    assert loaded.jobs[0].roles[0].debug is False
    assert [w.path for w in loaded.warnings] == ["roles.main.debug_hold"]
    assert "without debug: true" in loaded.warnings[0].message
    with pytest.raises(SpecError) as refused:
        load_job_text(NATIVE.format(extra="    debug: true\n    debug_hold: soon\n"), {})
    assert "roles.main.debug_hold" in str(refused.value)


def test_openpai_v2_is_debug_holds_every_role() -> None:
    loaded = load_job_text(PAI_V2.format(envs="{isDebug: true, other: 1}"), {})
    assert loaded.jobs[0].roles[0].debug is True
    assert "extras.jobEnvs.other" in [w.path for w in loaded.warnings]
    assert "extras.jobEnvs.isDebug" not in [w.path for w in loaded.warnings]
    assert load_job_text(PAI_V2.format(envs="{isDebug: false}"), {}).jobs[0].roles[0].debug is False
    with pytest.raises(SpecError) as refused:
        load_job_text(PAI_V2.format(envs="{isDebug: 'yes'}"), {})
    assert "extras.jobEnvs.isDebug (line 12): must be true or false" in str(refused.value)


def test_openpai_v1_is_debug_holds_every_role_and_is_no_variable() -> None:
    job = {
        "jobName": "d",
        "image": "python:3.11",
        "jobEnvs": {"isDebug": True, "KEPT": "1"},
        "taskRoles": [{"name": "w", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 512,
                       "gpuNumber": 0, "command": "false"}],
    }  # fmt: skip
    loaded = load_job_text(json.dumps(job), {})
    (spec,) = loaded.jobs
    assert spec.roles[0].debug is True and "isDebug" not in spec.env and spec.env["KEPT"] == "1"
    assert "jobEnvs.isDebug" not in [w.path for w in loaded.warnings]
