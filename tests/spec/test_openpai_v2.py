"""OpenPAI protocol v2: every verbatim sample parses right; bad input is explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_file, load_job_text
from shoal.spec.model import PriorityClass, SourceFormat

# file -> {role: (instances, cpu_millis, memory_mib, gpu)}, gang, priority
PAI_SAMPLES = {
    "hello-world-job.yaml": ({"taskrole": (1, 1000, 6500, 1)}, True, "test"),
    "tensorflow-cifar10.yaml": (
        {"worker": (1, 2000, 16384, 4), "psserver": (1, 2000, 16384, 1)},
        True,
        "test",
    ),
    "horovod-pytorch-synthetic-benchmark.yaml": (
        {"master": (1, 16000, 16384, 4), "worker": (1, 16000, 16384, 4)},
        True,
        "test",
    ),
    "CPU_500Task_MNIST.yaml": (
        {"master": (1, 1000, 50000, 0), "taskrole": (500, 1000, 50000, 0)},
        False,
        "test",
    ),
    "cifar10-single-mul-DDP-nccl.yaml": ({"worker": (2, 8000, 16384, 2)}, True, "test"),
    "caffe2-resnet50-debug.yaml": ({"train": (1, 1000, 1024, 0)}, True, "test"),
    "hived-itc-dtf.yaml": ({"worker": (1, 2000, 16384, 4), "ps": (1, 2000, 8192, 1)}, True, "test"),
    "hived-itc-oppo.yaml": ({"train": (6, 4000, 8192, 1)}, False, "oppo"),
    "hived-itc-pin.yaml": (
        {"vc1nopinned": (4, 3000, 8192, 1), "vc1pinned": (4, 3000, 8192, 1)},
        True,
        "prod",
    ),
}


def test_every_sample_is_covered(shared_dir: Path) -> None:
    on_disk = {p.name for p in (shared_dir / "compat" / "pai").glob("*.yaml")}
    assert on_disk == set(PAI_SAMPLES)


@pytest.mark.parametrize("name", sorted(PAI_SAMPLES))
def test_sample_parses(shared_dir: Path, name: str) -> None:
    roles, gang, priority = PAI_SAMPLES[name]
    parsed = load_job_file(shared_dir / "compat" / "pai" / name)
    assert parsed.format is SourceFormat.PAI_V2
    (job,) = parsed.jobs
    got = {
        r.name: (r.instances, r.resources.cpu_millis, r.resources.memory_mib, r.resources.gpu)
        for r in job.roles
    }
    assert got == roles
    assert job.gang is gang
    assert job.priority_class is PriorityClass(priority)
    for role in job.roles:
        assert role.command.strip()
        assert role.image  # every role names a dockerimage prerequisite
        assert {"http", "ssh"} <= set(role.resources.ports)


def test_templates_deployments_and_parameters(shared_dir: Path) -> None:
    parsed = load_job_file(shared_dir / "compat" / "pai" / "hived-itc-dtf.yaml", {"model": "vgg"})
    worker = parsed.jobs[0].role("worker")
    lines = worker.command.splitlines()
    # deployment preCommands first, then commands, then postCommands
    assert lines[0] == "rm /usr/local/cuda/lib64/stubs/libcuda.so.1"
    assert lines[-1] == "sleep 10"
    assert "wget -qO- https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in lines[1]
    assert "--model=vgg" in worker.command  # --param overrides parameters
    assert "--batch_size=32" in worker.command
    assert "--data_dir=/data_cifar10" in worker.command
    assert "git checkout 84820935288cab696c9c2ac409cbd46a1f24723d" in worker.command
    assert "<%" not in worker.command
    assert "$PAI_TASK_ROLE_ps_HOST_LIST" in worker.command  # shell variables are left alone


def test_extras_and_warnings(shared_dir: Path) -> None:
    parsed = load_job_file(shared_dir / "compat" / "pai" / "hived-itc-pin.yaml")
    job = parsed.jobs[0]
    assert job.role("vc1nopinned").resources.gpu_type == "K80"
    assert job.virtual_cluster == "vc1"
    paths = {w.path for w in parsed.warnings}
    assert "extras.hivedScheduler.taskRoles.vc1pinned.pinnedCellId" in paths
    assert all(w.line is not None for w in parsed.warnings)


def test_custom_ports_and_sku_num_warning(shared_dir: Path) -> None:
    parsed = load_job_file(shared_dir / "compat" / "pai" / "cifar10-single-mul-DDP-nccl.yaml")
    ports = parsed.jobs[0].role("worker").resources.ports
    assert ports == {"SynPort": 1, "http": 1, "ssh": 1}
    assert any(w.path.endswith("skuNum") for w in parsed.warnings)


def test_completion_defaults() -> None:
    job = load_job_text(_job(completion="{minFailedInstances: -1, minSucceededInstances: -1}"))
    policy = job.jobs[0].roles[0].completion
    assert (policy.min_failed, policy.min_succeeded) == (None, None)
    default = load_job_text(_job()).jobs[0].roles[0]
    assert (default.completion.min_failed, default.completion.min_succeeded) == (1, 2)


def test_min_failed_zero_is_one_with_a_warning() -> None:
    parsed = load_job_text(_job(completion="{minFailedInstances: 0}"))
    assert parsed.jobs[0].roles[0].completion.min_failed == 1
    assert any("read as 1" in w.message for w in parsed.warnings)


def test_secrets_are_kept_but_masked_and_not_rendered() -> None:
    text = _job(command="echo <% $secrets.token %>").replace(
        "taskRoles:", "secrets:\n  token: s3cr3t\ntaskRoles:"
    )
    job = load_job_text(text).jobs[0]
    assert job.secrets == {"token": "s3cr3t"}
    assert "s3cr3t" not in job.roles[0].command
    assert "<% $secrets.token %>" in job.roles[0].command
    assert job.public_dict()["secrets"] == {"token": "******"}
    assert "s3cr3t" not in repr(job)


def _job(
    completion: str = "{}",
    command: str = "echo hi",
    instances: str = "2",
    resources: str = "{cpu: 1, memoryMB: 512, gpu: 0}",
    role: str = "worker",
    extra_role: str = "",
    top: str = "",
) -> str:
    return f"""protocolVersion: 2
name: t
type: job
prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
taskRoles:
  {role}:
    instances: {instances}
    completion: {completion}
    dockerImage: img
    resourcePerInstance: {resources}
    commands: ["{command}"]
{extra_role}{top}"""


BAD_CASES = {
    "missing required field": (
        _job().replace("    dockerImage: img\n", ""),
        "taskRoles.worker.dockerImage",
        "is required",
    ),
    "wrong type": (
        _job(resources="{cpu: two, memoryMB: 512, gpu: 0}"),
        "taskRoles.worker.resourcePerInstance.cpu",
        "must be an integer, got 'two'",
    ),
    "negative gpu": (
        _job(resources="{cpu: 1, memoryMB: 512, gpu: -1}"),
        "taskRoles.worker.resourcePerInstance.gpu",
        "must be an integer >= 0, got -1",
    ),
    "absurd gpu": (
        _job(resources="{cpu: 1, memoryMB: 512, gpu: 1000}"),
        "taskRoles.worker.resourcePerInstance.gpu",
        "must be an integer <= 64, got 1000",
    ),
    "absurd memory": (
        _job(resources="{cpu: 1, memoryMB: 99999999999, gpu: 0}"),
        "taskRoles.worker.resourcePerInstance.memoryMB",
        "must be an integer <=",
    ),
    "zero instances": (
        _job(instances="0"),
        "taskRoles.worker.instances",
        "must be an integer >= 1",
    ),
    "role name not an identifier": (
        _job(role="my-worker"),
        "taskRoles.my-worker",
        "must be an identifier",
    ),
    "empty commands list": (
        _job().replace('commands: ["echo hi"]', "commands: []"),
        "taskRoles.worker.commands",
        "must have at least 1 item",
    ),
    "blank command": (_job(command="  "), "taskRoles.worker.commands", "command is empty"),
    "minSucceeded over instances": (
        _job(completion="{minSucceededInstances: 3}"),
        "taskRoles.worker.completion.minSucceededInstances",
        "only 2 instance(s)",
    ),
    "undefined docker image": (
        _job().replace("dockerImage: img", "dockerImage: nope"),
        "taskRoles.worker.dockerImage",
        "dockerimage prerequisite 'nope' does not exist",
    ),
    "undefined deployment": (
        _job(top="defaults: {deployment: fast}\n"),
        "defaults.deployment",
        "deployment 'fast' does not exist",
    ),
    "deployment for unknown role": (
        _job(top="deployments:\n  - {name: d, taskRoles: {ghost: {preCommands: [x]}}}\n"),
        "deployments[0].taskRoles.ghost",
        "task role 'ghost' does not exist",
    ),
    "undefined role prerequisite": (
        _job().replace("dockerImage: img", "dockerImage: img\n    prerequisites: [setup]"),
        "taskRoles.worker.prerequisites[0]",
        "prerequisite 'setup' does not exist",
    ),
    "duplicate prerequisite": (
        _job().replace(
            "uri: python:3.11}",
            "uri: python:3.11}\n  - {type: dockerimage, name: img, uri: other}",
        ),
        "prerequisites[1].name",
        "duplicate dockerimage prerequisite 'img'",
    ),
    "unknown field with suggestion": (
        _job().replace("instances:", "instanses:"),
        "taskRoles.worker.instanses",
        "unknown field",
    ),
    "bad job name": (_job().replace("name: t", "name: a b"), "name", "OpenPAI job names"),
    "bad protocol version": (
        _job().replace("protocolVersion: 2", "protocolVersion: 3"),
        "protocolVersion",
        "must be one of",
    ),
    "bad priority class": (
        _job(top="extras: {hivedScheduler: {jobPriorityClass: urgent}}\n"),
        "extras.hivedScheduler.jobPriorityClass",
        "must be one of crit, prod, test, oppo",
    ),
    "hived settings for unknown role": (
        _job(top="extras: {hivedScheduler: {taskRoles: {ghost: {skuType: K80}}}}\n"),
        "extras.hivedScheduler.taskRoles.ghost",
        "does not exist",
    ),
    "case-insensitive role clash": (
        _job(
            extra_role=(
                "  Worker:\n    dockerImage: img\n"
                "    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}\n"
                "    commands: [x]\n"
            )
        ),
        "taskRoles.Worker",
        "clashes with 'worker'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_explained(case: str) -> None:
    text, path, fragment = BAD_CASES[case]
    with pytest.raises(SpecError) as caught:
        load_job_text(text)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching, f"no problem at {path}: {[p.render() for p in caught.value.problems]}"
    assert any(fragment in p.message for p in matching), [p.render() for p in matching]
    assert all(p.line is not None for p in matching)


def test_unknown_field_suggests_the_right_name() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text(_job().replace("instances:", "instanses:"))
    (problem,) = [p for p in caught.value.problems if p.path.endswith("instanses")]
    assert problem.hint == "did you mean 'instances'?"


def test_all_schema_errors_are_reported_together() -> None:
    text = _job(resources="{cpu: -1, memoryMB: 0, gpu: -2}", instances="0")
    with pytest.raises(SpecError) as caught:
        load_job_text(text)
    paths = {p.path for p in caught.value.problems}
    assert {
        "taskRoles.worker.instances",
        "taskRoles.worker.resourcePerInstance.cpu",
        "taskRoles.worker.resourcePerInstance.memoryMB",
        "taskRoles.worker.resourcePerInstance.gpu",
    } <= paths


def test_a_reference_to_an_undeclared_secret_is_an_error_naming_it() -> None:
    text = _job(command="echo <% $secrets.tokn %>").replace(
        "taskRoles:", "secrets:\n  token: s3cr3t\ntaskRoles:"
    )
    with pytest.raises(SpecError) as caught:
        load_job_text(text)
    (problem,) = caught.value.problems
    assert problem.path.endswith(".commands") and "secrets.tokn" in problem.message


def test_shoal_data_prerequisites_declare_data_sets_for_the_roles_naming_them() -> None:
    text = (
        _job(command="python train.py --data <% $data.uri[0] %> --vocab <% $data.uri[1] %>")
        .replace(
            "  - {type: dockerimage",
            "  - {type: data, name: d, uri: ['shoal://corpus', 'shoal://bob/vocab']}\n"
            "  - {type: dockerimage",
        )
        .replace("    dockerImage: img\n", "    dockerImage: img\n    data: d\n")
    )
    parsed = load_job_text(text)
    role = parsed.jobs[0].roles[0]
    assert role.data == ("corpus", "bob/vocab")
    assert parsed.jobs[0].data_for("worker") == ("corpus", "bob/vocab")
    assert "--data $SHOAL_DATA_DIR/corpus --vocab $SHOAL_DATA_DIR/bob/vocab" in role.command
    assert not any("not fetched" in w.message for w in parsed.warnings)
    other = load_job_text(
        _job(command="cat <% $data.uri %>")
        .replace(
            "  - {type: dockerimage",
            "  - {type: data, name: h, uri: 'hdfs://nn/x'}\n  - {type: dockerimage",
        )
        .replace("    dockerImage: img\n", "    dockerImage: img\n    data: h\n")
    )
    assert other.jobs[0].roles[0].data == ()
    assert "cat hdfs://nn/x" in other.jobs[0].roles[0].command
    (warning,) = [w for w in other.warnings if "not fetched" in w.message]
    assert warning.path == "prerequisites[0].uri" and "shoal://NAME" in (warning.hint or "")
