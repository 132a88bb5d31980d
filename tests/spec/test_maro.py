"""MARO job files: the verbatim MARO templates, their mapping to JobSpec, and every error class."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from shoal.spec.errors import SpecError, SpecProblem
from shoal.spec.loader import ParsedJobs, load_job_file, load_job_text
from shoal.spec.model import SourceFormat

SHARED = Path(__file__).resolve().parents[3] / "shared"
MARO_DIR = SHARED / "compat" / "maro"
SCHEDULE_JOBS = ("MyJobName2", "MyJobName3", "MyJobName4", "MyJobName5")


@pytest.fixture
def maro_dir() -> Path:
    if not MARO_DIR.is_dir():
        pytest.skip(f"MARO samples not found at {MARO_DIR}")
    return MARO_DIR


def _load(text: str) -> ParsedJobs:
    return load_job_text(text)


def _problems(text: str) -> list[SpecProblem]:
    with pytest.raises(SpecError) as caught:
        _load(text)
    return caught.value.problems


def _find(problems: list[SpecProblem], path: str) -> SpecProblem:
    found = [p for p in problems if p.path == path]
    assert found, f"no problem at {path!r}; got {[p.render() for p in problems]}"
    return found[0]


# --- the verbatim MARO job templates ---

# role -> (instances, cpu_millis, memory_mib, gpu, image, command)
Roles = dict[str, tuple[int, int, int, int, str | None, str]]

PROCESS_ROLES: Roles = {
    "actor": (5, 1000, 1024, 0, None, "python /target/path/run_actor.py"),
    "learner": (1, 1000, 1024, 0, None, "python /target/path/run_learner.py"),
}
GRASS_ROLES: Roles = {
    "actor": (5, 2000, 4096, 0, "MyImageName", "python /mnt/data/run_actor.py"),
    "learner": (1, 4000, 8192, 0, "MyImageName", "python /mnt/data/run_learner.py"),
}
GRASS_LOCAL_ROLES: Roles = {
    "actor": (5, 2000, 4096, 0, "MyImageName", "python /mount/path/run_actor.py"),
    "learner": (1, 4000, 8192, 0, "MyImageName", "python /mount/path/run_learner.py"),
}
K8S_ROLES: Roles = {  # 4096M = 4.096e9 bytes = 3906.25 MiB, rounded up
    "actor": (5, 2000, 3907, 0, "MyImageName", "python /mnt/data/run_actor.py"),
    "learner": (1, 4000, 7813, 0, "MyImageName", "python /mnt/data/run_learner.py"),
}
RL_ROLES: Roles = {
    "main": (1, 1000, 1024, 0, None, "python -m maro.rl.workflows.main"),
    "rollout_worker": (
        10,
        1000,
        1024,
        0,
        None,
        'ID="$SHOAL_TASK_INDEX" ROLLOUT_CONTROLLER_HOST="${SHOAL_MAIN_HOSTS%%:*}" '
        "python -m maro.rl.workflows.rollout_worker",
    ),
}

JOB_FILES = [
    ("process/process_job_deployment.yml", ("MyJobName",), PROCESS_ROLES),
    ("process/process_schedule_deployment.yml", SCHEDULE_JOBS, PROCESS_ROLES),
    ("grass/grass_azure_start_job.yml", ("MyJobName",), GRASS_ROLES),
    ("grass/grass_azure_start_schedule.yml", SCHEDULE_JOBS, GRASS_ROLES),
    ("grass/grass_local_start_job.yml", ("MyJobName",), GRASS_LOCAL_ROLES),
    ("grass/grass_local_start_schedule.yml", SCHEDULE_JOBS, GRASS_LOCAL_ROLES),
    ("k8s/k8s_aks_start_job.yml", ("MyJobName",), K8S_ROLES),
    ("k8s/k8s_aks_start_schedule.yml", SCHEDULE_JOBS, K8S_ROLES),
    ("local-v0.3/rl_workflow_job_template.yml", ("your_job_name",), RL_ROLES),
]


@pytest.mark.parametrize(("relative", "job_names", "roles"), JOB_FILES)
def test_maro_job_files_parse(
    maro_dir: Path, relative: str, job_names: tuple[str, ...], roles: Roles
) -> None:
    parsed = load_job_file(maro_dir / relative)
    assert parsed.format is SourceFormat.MARO
    assert tuple(job.name for job in parsed.jobs) == job_names
    for job in parsed.jobs:
        assert job.source_format is SourceFormat.MARO
        got = {
            role.name: (
                role.instances,
                role.resources.cpu_millis,
                role.resources.memory_mib,
                role.resources.gpu,
                role.image,
                role.command,
            )
            for role in job.roles
        }
        assert got == roles


IMAGES = ["components.actor.image", "components.learner.image"]  # recorded, not used
LEARNER_MOUNT_IMAGES = ["components.learner.mount", *IMAGES]


@pytest.mark.parametrize(
    ("relative", "warned_paths"),
    [
        ("process/process_job_deployment.yml", ["components"]),
        (
            "grass/grass_azure_start_job.yml",
            ["components.actor.mount", "components.learner.mount", "allocation", *IMAGES],
        ),
        ("grass/grass_local_start_job.yml", ["components.actor.mount", *LEARNER_MOUNT_IMAGES]),
        ("k8s/k8s_aks_start_job.yml", ["components.actor.mount", *LEARNER_MOUNT_IMAGES]),
        (
            "local-v0.3/rl_workflow_job_template.yml",
            ["rollout.parallelism.controller.host", "", ""],
        ),
    ],
)
def test_maro_job_files_warn_about_what_is_not_acted_on(
    maro_dir: Path, relative: str, warned_paths: list[str]
) -> None:
    parsed = load_job_file(maro_dir / relative)
    assert sorted(w.path for w in parsed.warnings) == sorted(warned_paths)
    assert all(w.message for w in parsed.warnings)


def test_process_mode_warns_once_about_assumed_resources(maro_dir: Path) -> None:
    parsed = load_job_file(maro_dir / "process/process_schedule_deployment.yml")
    assumed = [w for w in parsed.warnings if "1 cpu / 1 GiB" in w.message]
    assert len(assumed) == 1
    assert assumed[0].line == 10  # the `components:` line of the schedule file


def test_schedule_jobs_share_components_and_name_the_schedule(maro_dir: Path) -> None:
    parsed = load_job_file(maro_dir / "grass/grass_azure_start_schedule.yml")
    first = parsed.jobs[0].roles
    assert all(job.roles == first for job in parsed.jobs[1:])
    assert all("MyScheduleName" in (job.description or "") for job in parsed.jobs)


@pytest.mark.parametrize(
    "relative",
    [
        "grass/grass_azure_create.yml",
        "grass/grass_local_create.yml",
        "grass/grass_on_premises_create.yml",
        "grass/grass_on_premises_join_node.yml",
        "k8s/k8s_aks_create.yml",
        "process/process_setting_deployment.yml",
        "local-v0.3/aks_conf.yml",
    ],
)
def test_maro_cluster_files_are_rejected_as_not_jobs(maro_dir: Path, relative: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_job_file(maro_dir / relative)
    assert "not a job" in str(caught.value)


# --- RL workflow configs ---


def _rl_config(maro_dir: Path) -> dict[str, Any]:
    text = (maro_dir / "local-v0.3/rl_workflow_job_template.yml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def test_rl_workflow_passes_the_config_as_maro_does(maro_dir: Path) -> None:
    job = load_job_file(maro_dir / "local-v0.3/rl_workflow_job_template.yml").jobs[0]
    main = job.role("main")
    assert main.env["JOB"] == "your_job_name"
    assert main.env["SCENARIO_PATH"] == "/path/to/your/scenario"
    assert main.env["LOG_PATH"] == "/path/to/your/log/folder"
    assert main.env["NUM_EPISODES"] == "100"
    assert main.env["TRAIN_MODE"] == "simple"
    assert main.env["EVAL_SCHEDULE"] == " ".join(str(n) for n in range(10, 101, 10))
    assert main.env["ENV_SAMPLE_PARALLELISM"] == "10"
    assert main.env["ENV_EVAL_PARALLELISM"] == "1"
    assert main.env["ROLLOUT_CONTROLLER_PORT"] == "20000"
    assert main.env["MIN_ENV_SAMPLES"] == "8"
    assert main.env["GRACE_FACTOR"] == "0.2"
    assert main.env["CHECKPOINT_PATH"] == "/path/to/your/checkpoint/folder"
    assert main.env["LOAD_PATH"] == "/path/to/your/models"
    assert main.completion.min_succeeded == 1
    worker = job.role("rollout_worker")
    assert worker.env["ROLLOUT_CONTROLLER_PORT"] == "20000"
    assert worker.env["SCENARIO_PATH"] == "/path/to/your/scenario"
    assert worker.env["LOG_LEVEL_STDOUT"] == "INFO"
    assert "TRAIN_PROXY_HOST" not in main.command


def _parallel_training(conf: dict[str, Any]) -> None:
    conf["training"]["mode"] = "parallel"
    conf["training"]["num_workers"] = 3


def _no_parallel_rollout(conf: dict[str, Any]) -> None:
    del conf["rollout"]["parallelism"]


def _eval_workers_exceed_sampling(conf: dict[str, Any]) -> None:
    conf["rollout"]["parallelism"].update(sampling=2, eval=6, min_env_samples=2)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_no_parallel_rollout, {"main": 1}),
        (_eval_workers_exceed_sampling, {"main": 1, "rollout_worker": 6}),
        (
            _parallel_training,
            {"main": 1, "rollout_worker": 10, "train_proxy": 1, "train_worker": 3},
        ),
    ],
)
def test_rl_workflow_roles_follow_parallelism(
    maro_dir: Path, change: Callable[[dict[str, Any]], None], expected: dict[str, int]
) -> None:
    conf = _rl_config(maro_dir)
    change(conf)
    job = _load(yaml.safe_dump(conf)).jobs[0]
    assert {role.name: role.instances for role in job.roles} == expected
    for role in job.roles:
        assert f"python -m maro.rl.workflows.{role.name}" in role.command


def test_rl_parallel_training_wires_proxy_ports(maro_dir: Path) -> None:
    conf = _rl_config(maro_dir)
    _parallel_training(conf)
    job = _load(yaml.safe_dump(conf)).jobs[0]
    assert job.role("main").env["TRAIN_PROXY_FRONTEND_PORT"] == "10000"
    assert job.role("train_proxy").env["TRAIN_PROXY_BACKEND_PORT"] == "10001"
    assert job.role("train_worker").env["TRAIN_PROXY_BACKEND_PORT"] == "10001"
    assert "SHOAL_TRAIN_PROXY_HOSTS" in job.role("main").command


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("rollout_worker", "3|198.18.0.5|-m maro.rl.workflows.rollout_worker"),
        ("train_worker", "3|198.18.0.7|-m maro.rl.workflows.train_worker"),
    ],
)
def test_rl_worker_commands_expand_in_a_shell(maro_dir: Path, role: str, expected: str) -> None:
    conf = _rl_config(maro_dir)
    _parallel_training(conf)
    command = _load(yaml.safe_dump(conf)).jobs[0].role(role).command
    host_var = "ROLLOUT_CONTROLLER_HOST" if role == "rollout_worker" else "TRAIN_PROXY_HOST"
    fake_python = f'python() {{ echo "$ID|${host_var}|$*"; }}\n'
    result = subprocess.run(
        ["sh", "-c", fake_python + command],
        env={
            "SHOAL_TASK_INDEX": "3",
            "SHOAL_MAIN_HOSTS": "198.18.0.5:20000",
            "SHOAL_TRAIN_PROXY_HOSTS": "198.18.0.7:10000,198.18.0.8:10000",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == expected


def test_rl_workflow_unread_keys_pass_through(maro_dir: Path) -> None:
    conf = _rl_config(maro_dir)
    conf["experiment_tag"] = "baseline"
    conf["main"]["custom_knob"] = {"a": 1}
    assert _load(yaml.safe_dump(conf)).jobs[0].name == "your_job_name"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(conf: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = conf
        for key in parents:
            node = node[key]
        node[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(conf: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = conf
        for key in parents:
            node = node[key]
        del node[last]

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(conf: dict[str, Any]) -> None:
        for one in changes:
            one(conf)

    return change


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        (_drop("main.num_episodes"), "main.num_episodes", "is required"),
        (_drop("log_path"), "log_path", "is required"),
        (_set("main.num_episodes", "100"), "main.num_episodes", "must be an integer"),
        (_set("main.num_episodes", 0), "main.num_episodes", ">= 1"),
        (_set("rollout.parallelism.sampling", -3), "rollout.parallelism.sampling", ">= 1"),
        (_set("rollout.parallelism.sampling", 10**6), "rollout.parallelism.sampling", "<= "),
        (
            _set("rollout.parallelism.min_env_samples", 11),
            "rollout.parallelism.min_env_samples",
            "",
        ),
        (_drop("rollout.parallelism.controller"), "rollout.parallelism.controller", "required"),
        (_set("training.mode", "distributed"), "training.mode", "must be one of"),
        (
            _both(_set("training.mode", "parallel"), _drop("training.num_workers")),
            "training.num_workers",
            "is required when",
        ),
        (
            _both(_set("training.mode", "parallel"), _drop("training.proxy")),
            "training.proxy",
            "is required when",
        ),
        (_set("main.eval_schedule", "often"), "main.eval_schedule", "positive integer"),
        (_set("main.eval_schedule", [5, 0]), "main.eval_schedule", "positive integer"),
        (_set("main.logging.stdout", "LOUD"), "main.logging.stdout", "must be one of"),
        (_set("job", "my job"), "job", "letters, digits"),
        (_set("training.proxy.frontend", 70000), "training.proxy.frontend", "<= 65535"),
    ],
)
def test_rl_workflow_errors(
    maro_dir: Path, change: Callable[[dict[str, Any]], None], path: str, fragment: str
) -> None:
    conf = _rl_config(maro_dir)
    change(conf)
    problem = _find(_problems(yaml.safe_dump(conf)), path)
    assert fragment in problem.message


# --- component-job errors ---

GRASS_JOB: dict[str, Any] = {
    "mode": "grass/azure",
    "name": "rl-run",
    "allocation": {"mode": "single-metric-balanced", "metric": "cpu"},
    "components": {
        "actor": {
            "image": "maro/cim:latest",
            "resources": {"cpu": 2, "memory": "4096m", "gpu": 0},
            "num": 5,
            "command": "python run_actor.py",
        },
        "learner": {
            "image": "maro/cim:latest",
            "resources": {"cpu": 4, "memory": "8192m", "gpu": 1},
            "num": 1,
            "command": "python run_learner.py",
        },
    },
}


def _grass(change: Callable[[dict[str, Any]], None]) -> str:
    job = copy.deepcopy(GRASS_JOB)
    change(job)
    return yaml.safe_dump(job, sort_keys=False)


def _k8s(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def to_k8s(job: dict[str, Any]) -> None:
        job["mode"] = "k8s/aks"
        del job["allocation"]
        for component in job["components"].values():
            component["resources"]["memory"] = "4096M"
            component["command"] = component["command"].split()
        change(job)

    return to_k8s


def _process(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def to_process(job: dict[str, Any]) -> None:
        job["mode"] = "process"
        del job["allocation"]
        for component in job["components"].values():
            del component["image"], component["resources"]
        change(job)

    return to_process


def _rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(job: dict[str, Any]) -> None:
        job["components"][new] = job["components"].pop(old)

    return change


ACTOR = "components.actor"
COMPONENT_ERRORS = [
    # missing required fields
    (_drop("components.actor.command"), f"{ACTOR}.command", "is required", None),
    (_drop("components.actor.image"), f"{ACTOR}.image", "is required", None),
    (_drop("components.actor.resources.memory"), f"{ACTOR}.resources.memory", "is required", None),
    (_set("components", {}), "components", "at least 1", None),
    (_drop("mode"), "mode", "is required", "allowed modes"),
    (_process(_drop("components.actor.num")), f"{ACTOR}.num", "is required", None),
    # wrong types
    (_set("components.actor.num", "5"), f"{ACTOR}.num", "must be an integer", None),
    (_set("components.actor.resources.cpu", [2]), f"{ACTOR}.resources.cpu", "cpu amount", None),
    (_set("components.actor.resources.memory", True), f"{ACTOR}.resources.memory", "boolean", None),
    (_set("components.actor", "python x.py"), ACTOR, "must be a mapping", None),
    (_k8s(_set("components.actor.command", "python a.py")), f"{ACTOR}.command", "a list", None),
    (_set("job_names", "MyJob2"), "job_names", "must be a list", None),
    # bad values
    (_set("mode", "grass/azur"), "mode", "MARO job mode", "grass/azure"),
    (_set("allocation.metric", "disk"), "allocation.metric", "must be one of", None),
    (_set("name", "my job"), "name", "letters, digits", None),
    (
        _k8s(_set("components.actor.resources.memory", "4096m")),
        f"{ACTOR}.resources.memory",
        "",
        None,
    ),
    # negative and absurd resources
    (_set("components.actor.resources.cpu", -2), f"{ACTOR}.resources.cpu", "between", None),
    (_set("components.actor.resources.gpu", -1), f"{ACTOR}.resources.gpu", ">= 0", None),
    (_set("components.actor.resources.memory", "-4096m"), f"{ACTOR}.resources.memory", "", None),
    (_set("components.actor.resources.gpu", 1000), f"{ACTOR}.resources.gpu", "<= 64", None),
    (_set("components.actor.resources.cpu", 5000), f"{ACTOR}.resources.cpu", "between", None),
    (_set("components.actor.resources.memory", "99999999m"), f"{ACTOR}.resources.memory", "", None),
    # zero or too many instances
    (_set("components.actor.num", 0), f"{ACTOR}.num", ">= 1", None),
    (_set("components.actor.num", 10**6), f"{ACTOR}.num", "<= ", None),
    # role names
    (_rename("actor", "bad-actor"), "components.bad-actor", "identifier", "role names"),
    (_rename("actor", "1actor"), "components.1actor", "identifier", None),
    (_rename("actor", "Learner"), "components.Learner", "clashes with 'learner'", None),
    (_set("job_names", ["a", "b", "a"]), "job_names[2]", "duplicate job name", None),
    # empty commands
    (_set("components.actor.command", "   "), f"{ACTOR}.command", "command is empty", None),
    (_k8s(_set("components.actor.command", [""])), f"{ACTOR}.command", "command is empty", None),
    (_process(_set("components.actor.command", "")), f"{ACTOR}.command", "is empty", None),
    # unknown fields, with a did-you-mean hint
    (
        _set("components.actor.comand", "x"),
        f"{ACTOR}.comand",
        "unknown field",
        "did you mean 'command'?",
    ),
    (_set("job_name", ["a"]), "job_name", "unknown field", "did you mean 'job_names'?"),
    (
        _set("components.actor.resources.gpus", 1),
        f"{ACTOR}.resources.gpus",
        "unknown field",
        "did you mean 'gpu'?",
    ),
    (_k8s(_set("allocation", {})), "allocation", "unknown field", None),
    (_process(_set("components.actor.image", "x")), f"{ACTOR}.image", "unknown field", None),
]


@pytest.mark.parametrize(("change", "path", "fragment", "hint"), COMPONENT_ERRORS)
def test_component_job_errors(
    change: Callable[[dict[str, Any]], None], path: str, fragment: str, hint: str | None
) -> None:
    problem = _find(_problems(_grass(change)), path)
    assert fragment in problem.message
    if hint is not None:
        assert hint in (problem.hint or "")


def test_all_errors_are_collected_not_only_the_first() -> None:
    def several(job: dict[str, Any]) -> None:
        job["name"] = "bad name"  # top level
        job["allocation"]["mode"] = "random"  # nested top-level model
        job["components"]["actor"]["num"] = 0  # one component's structure
        job["components"]["learner"]["resources"]["memory"] = "lots"  # another's quantities
        job["components"]["learner"]["resources"]["cpu"] = -1

    paths = {p.path for p in _problems(_grass(several))}
    assert paths == {
        "name",
        "allocation.mode",
        f"{ACTOR}.num",
        "components.learner.resources.memory",
        "components.learner.resources.cpu",
    }


def test_syntax_error_has_a_line_number() -> None:
    text = "mode: grass/azure\nname: x\ncomponents:\n  actor:\n    num: [1\n    image: y\n"
    problem = _problems(text)[0]
    assert "invalid YAML" in problem.message
    assert problem.line is not None and problem.line >= 5


def test_duplicate_component_is_rejected_with_its_line() -> None:
    text = (
        "mode: process\nname: x\ncomponents:\n"
        "  actor:\n    num: 1\n    command: a\n"
        "  actor:\n    num: 2\n    command: b\n"
    )
    problem = _find(_problems(text), "components.actor")
    assert "duplicate" in problem.message
    assert problem.line == 7


def test_errors_carry_the_line_of_the_field() -> None:
    text = _grass(_set("components.actor.comand", "x"))
    expected = 1 + text.splitlines().index("    comand: x")
    assert _find(_problems(text), f"{ACTOR}.comand").line == expected


def test_k8s_memory_is_a_kubernetes_quantity() -> None:
    job = _load(_grass(_k8s(_set("components.actor.resources.memory", "2Gi")))).jobs[0]
    assert job.role("actor").resources.memory_mib == 2048
    assert job.role("learner").resources.memory_mib == 3907


def test_k8s_command_is_joined_as_shell_words() -> None:
    argv = ["python", "train.py", "--tag", "a b", "--expr", "$HOME"]
    job = _load(_grass(_k8s(_set("components.actor.command", argv)))).jobs[0]
    assert job.role("actor").command == "python train.py --tag 'a b' --expr '$HOME'"


def test_grass_gpu_and_fractional_cpu() -> None:
    job = _load(_grass(_set("components.actor.resources.cpu", 0.5))).jobs[0]
    assert job.role("actor").resources.cpu_millis == 500
    assert job.role("learner").resources.gpu == 1
