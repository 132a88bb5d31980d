"""OpenPAI runtime plugins: what the reader makes of them, and what the composed command does
when a real shell runs it (bash, as the process runtime does, and dash, a container's /bin/sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from shoal.spec.errors import SpecError
from shoal.spec.loader import ParsedJobs, load_job_text
from shoal.spec.model import JobSpec

SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]


def _job(plugins: str = "", roles: str = "", prerequisites: str = "", top: str = "") -> str:
    text = f"""protocolVersion: 2
name: plugged
type: job
{top}prerequisites:
  - {{type: dockerimage, name: img, uri: python:3.11}}
{prerequisites}taskRoles:
  worker:
    instances: 2
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 256, gpu: 0}}
    commands: [echo main >> "$OUT"]
{roles}"""
    if plugins:
        text += f"extras:\n  com.microsoft.pai.runtimeplugin:\n{plugins}"
    return text


def _load(text: str) -> tuple[JobSpec, ParsedJobs]:
    """The job, and what was read with it (less the image warning of a job run as processes)."""
    parsed = load_job_text(text)
    kept = tuple(w for w in parsed.warnings if not w.path.endswith("dockerImage"))
    return parsed.jobs[0], replace(parsed, warnings=kept)


def _run(
    command: str, tmp_path: Path, shell: str = "bash", **env: str
) -> tuple[int, list[str], str | None]:
    """Run a composed command as a task would: (exit code, lines written to $OUT, message)."""
    work = tmp_path / "work"
    (work / ".shoal").mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out.txt"
    out.unlink(missing_ok=True)
    message = work / ".shoal" / "exit-message"
    message.unlink(missing_ok=True)
    variables = {"PATH": os.environ["PATH"], "OUT": str(out), "SHOAL_WORKDIR": str(work)}
    done = subprocess.run(
        [shell, "-c", command],
        cwd=work,
        env=variables | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = out.read_text().splitlines() if out.exists() else []
    said = message.read_text().strip() if message.exists() else None
    return done.returncode, lines, said


CMD = """    - plugin: cmd
      parameters:
        preCommands: [echo pre0 >> "$OUT", "echo pre1 >> \\"$OUT\\""]
        postCommands: [echo post0 >> "$OUT"]
"""


# ---- the reader ----


def test_a_role_without_plugins_keeps_its_command_as_written() -> None:
    job, parsed = _load(_job())
    assert job.roles[0].command == 'echo main >> "$OUT"'
    assert not parsed.warnings


def test_cmd_plugins_are_run_not_warned_about() -> None:
    job, parsed = _load(_job(CMD))
    assert not [w for w in parsed.warnings if "plugin" in w.message]
    command = job.roles[0].command
    assert command.index("echo pre0") < command.index("echo main") < command.index("echo post0")


def test_plugins_shoal_does_not_run_are_warned_about_by_name() -> None:
    plugins = "    - plugin: teamwise_storage\n      parameters: {storageConfigNames: [nfs]}\n"
    job, parsed = _load(_job(plugins))
    (warning,) = parsed.warnings
    assert warning.path == "extras.com.microsoft.pai.runtimeplugin[0]"
    assert "'teamwise_storage' is not run by shoal" in warning.message
    assert job.roles[0].command == 'echo main >> "$OUT"'


def test_task_roles_limit_a_plugin_to_those_roles() -> None:
    other = """  chief:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: [echo chief]
"""
    for key in ("taskroles", "taskRoles"):
        plugins = f"    - plugin: cmd\n      {key}: [chief]\n      parameters:\n"
        plugins += "        preCommands: [echo only-chief]\n"
        job, _ = _load(_job(plugins, roles=other))
        assert "only-chief" in job.role("chief").command
        assert job.role("worker").command == 'echo main >> "$OUT"'


@pytest.mark.parametrize(
    ("plugins", "path", "words"),
    [
        (
            "    - plugin: cmd\n      taskroles: [nobody]\n      parameters: {preCommands: [x]}\n",
            "extras.com.microsoft.pai.runtimeplugin[0].taskroles[0]",
            "task role 'nobody' does not exist",
        ),
        (
            "    - plugin: cmd\n      failurePolicy: never\n      parameters: {preCommands: [x]}\n",
            "extras.com.microsoft.pai.runtimeplugin[0].failurePolicy",
            "must be one of fail, ignore",
        ),
        (
            "    - plugin: cmd\n      parameters:\n        preCommands: [x]\n"
            "        callbacks: [{event: taskStarts, commands: [y]}]\n",
            "extras.com.microsoft.pai.runtimeplugin[0].parameters.preCommands",
            "cannot be given with callbacks",
        ),
        (
            "    - plugin: cmd\n      parameters:\n"
            "        callbacks: [{event: taskFails, commands: [y]}]\n",
            "extras.com.microsoft.pai.runtimeplugin[0].parameters.callbacks[0].event",
            "must be one of taskStarts",
        ),
        (
            "    - plugin: git\n      parameters: {options: [--depth 1]}\n",
            "extras.com.microsoft.pai.runtimeplugin[0].parameters.repo_uri",
            "needs the repository to clone",
        ),
        (
            "    - plugin: tensorboard\n      parameters: {port: 10001}\n",
            "extras.com.microsoft.pai.runtimeplugin[0].parameters.logdir",
            "must map names to log directories",
        ),
        (
            "    - plugin: cmd\n      parameters: {preCommands: [echo <% $secrets.nope %>]}\n",
            "extras.com.microsoft.pai.runtimeplugin[0]",
            "<% $secrets.nope %> names no entry in secrets",
        ),
        ("    - {parameters: {}}\n", "extras.com.microsoft.pai.runtimeplugin[0]", "plugin name"),
    ],
)
def test_bad_plugin_settings_are_refused_naming_the_field(
    plugins: str, path: str, words: str
) -> None:
    with pytest.raises(SpecError) as raised:
        load_job_text(_job(plugins))
    found = [p for p in raised.value.problems if p.path == path]
    assert found and words in found[0].message, raised.value.problems


def test_plugin_commands_render_parameters_and_keep_secrets_for_the_agent() -> None:
    plugins = """    - plugin: cmd
      parameters:
        preCommands: ["echo <% $parameters.greeting %> <% $secrets.token %>"]
"""
    top = "parameters: {greeting: hello}\nsecrets: {token: s3cr3t}\n"
    job, _ = _load(_job(plugins, top=top))
    command = job.roles[0].command
    assert "echo hello <% $secrets.token %>" in command
    assert "s3cr3t" not in command
    # the failure message names the command with the secret hidden, so it can never show it
    assert "preCommands[0] `echo hello <secret>`" in command


def test_tensorboard_runs_on_the_first_task_of_the_first_role_on_a_labelled_port() -> None:
    other = """  second:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: [echo second]
"""
    plugins = """    - plugin: tensorboard
      parameters: {port: 10042, logdir: {path: /mnt/tensorboard}}
"""
    job, parsed = _load(_job(plugins, roles=other))
    first, second = job.roles
    assert first.resources.ports["tensorboard"] == 1
    assert "tensorboard" not in second.resources.ports
    assert "tensorboard" not in second.command
    assert '--port "$SHOAL_PORT_tensorboard"' in first.command
    (warning,) = [w for w in parsed.warnings if w.path.endswith("parameters.port")]
    assert "port 10042 is not used" in warning.message


def test_prerequisite_plugins_run_in_the_roles_order_and_in_reverse_after(
    tmp_path: Path,
) -> None:
    prerequisites = "".join(
        f"""  - name: {name}
    type: script
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks:
      - {{event: taskStarts, commands: [echo start-{name} >> "$OUT"]}}
      - {{event: taskSucceeds, commands: [echo end-{name} >> "$OUT"]}}
"""
        for name in ("a", "b")
    )
    text = _job(CMD, prerequisites=prerequisites).replace(
        "    dockerImage: img\n", "    dockerImage: img\n    prerequisites: [b, a]\n", 1
    )
    job, parsed = _load(text)
    assert not [w for w in parsed.warnings if "plugin" in w.message]
    code, lines, said = _run(job.roles[0].command, tmp_path)
    assert (code, said) == (0, None)
    assert lines == [
        "start-b",
        "start-a",
        "pre0",
        "pre1",
        "main",
        "post0",
        "end-a",
        "end-b",
    ]


def test_other_prerequisite_plugins_are_warned_about() -> None:
    prerequisites = """  - name: fetch
    type: data
    plugin: someone.elses.plugin
    uri: [http://example.com/x]
"""
    _, parsed = _load(_job(prerequisites=prerequisites))
    assert any(
        w.path == "prerequisites[1].plugin" and "'someone.elses.plugin'" in w.message
        for w in parsed.warnings
    )


# ---- the composed command, run ----


@pytest.mark.parametrize("shell", SHELLS)
def test_pre_commands_run_in_order_before_and_post_commands_after(
    shell: str, tmp_path: Path
) -> None:
    job, _ = _load(_job(CMD))
    code, lines, said = _run(job.roles[0].command, tmp_path, shell)
    assert (code, lines, said) == (0, ["pre0", "pre1", "main", "post0"], None)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_failing_pre_command_fails_the_task_with_its_code_and_says_which(
    shell: str, tmp_path: Path
) -> None:
    plugins = CMD.replace('"echo pre1', '"exit 3; echo pre1')
    job, _ = _load(_job(plugins))
    code, lines, said = _run(job.roles[0].command, tmp_path, shell)
    assert code == 3
    assert lines == ["pre0"]  # neither the commands nor the post-commands ran
    assert said == 'runtime plugin cmd: preCommands[1] `exit 3; echo pre1 >> "$OUT"` exited 3'


@pytest.mark.parametrize("shell", SHELLS)
def test_post_commands_run_only_when_the_commands_succeed(shell: str, tmp_path: Path) -> None:
    job, _ = _load(_job(CMD).replace('[echo main >> "$OUT"]', '[echo main >> "$OUT", exit 4]'))
    code, lines, said = _run(job.roles[0].command, tmp_path, shell)
    assert (code, lines, said) == (4, ["pre0", "pre1", "main"], None)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_failing_post_command_fails_the_task(shell: str, tmp_path: Path) -> None:
    job, _ = _load(_job(CMD.replace("[echo post0", "[false, echo post0")))
    code, lines, said = _run(job.roles[0].command, tmp_path, shell)
    assert (code, lines) == (1, ["pre0", "pre1", "main"])
    assert said == "runtime plugin cmd: postCommands[0] `false` exited 1"


def test_failure_policy_ignore_goes_on_past_a_failing_command(tmp_path: Path) -> None:
    plugins = """    - plugin: cmd
      failurePolicy: ignore
      parameters:
        preCommands: [(exit 5), echo after >> "$OUT"]
"""
    job, _ = _load(_job(plugins))
    code, lines, said = _run(job.roles[0].command, tmp_path)
    assert (code, lines, said) == (0, ["after", "main"], None)


def test_what_a_step_exports_does_not_reach_the_commands(tmp_path: Path) -> None:
    plugins = "    - plugin: cmd\n      parameters: {preCommands: [export LEAK=1]}\n"
    job, _ = _load(_job(plugins).replace("echo main >>", "echo main$LEAK >>"))
    assert _run(job.roles[0].command, tmp_path)[:2] == (0, ["main"])


def _bare_repo(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository with two commits: (its path, the first commit)."""
    source = tmp_path / "source"
    source.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(source)], check=True)
    for content in ("one", "two"):
        (source / "train.py").write_text(f"print('{content}')\n")
        subprocess.run([*git, "-C", str(source), "add", "."], check=True)
        subprocess.run([*git, "-C", str(source), "commit", "-qm", content], check=True)
    first = subprocess.run(
        ["git", "-C", str(source), "rev-list", "--max-parents=0", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True)
    return bare, first


@pytest.mark.parametrize("shell", SHELLS)
def test_git_clones_the_repository_before_the_commands(shell: str, tmp_path: Path) -> None:
    bare, first = _bare_repo(tmp_path)
    plugins = f"""    - plugin: git
      parameters:
        repo_uri: file://{bare}
        options: [--quiet]
        clone_dir: src
        commit: {first}
"""
    job, parsed = _load(
        _job(plugins).replace('[echo main >> "$OUT"]', '[cat src/train.py > "$OUT"]')
    )
    assert not parsed.warnings
    code, lines, said = _run(job.roles[0].command, tmp_path, shell)
    assert (code, lines, said) == (0, ["print('one')"], None)


def test_git_without_a_clone_dir_clones_into_the_tasks_directory(tmp_path: Path) -> None:
    bare, _ = _bare_repo(tmp_path)
    plugins = f"    - plugin: git\n      parameters: {{repo: 'file://{bare}'}}\n"
    text = _job(plugins).replace(
        '[echo main >> "$OUT"]', '[cat "$SHOAL_WORKDIR/code/train.py" > "$OUT"]'
    )
    job, _ = _load(text)
    assert _run(job.roles[0].command, tmp_path) == (0, ["print('two')"], None)


def test_a_clone_that_fails_fails_the_task_naming_the_repository(tmp_path: Path) -> None:
    plugins = f"    - plugin: git\n      parameters: {{repo_uri: 'file://{tmp_path}/none.git'}}\n"
    job, _ = _load(_job(plugins))
    code, lines, said = _run(job.roles[0].command, tmp_path)
    assert code == 128 and lines == []
    assert said == (
        f"runtime plugin git: `git clone file://{tmp_path}/none.git` into "
        "$SHOAL_WORKDIR/code exited 128"
    )


TENSORBOARD = """    - plugin: tensorboard
      parameters: {port: 10001, logdir: {train: /mnt/tb/train, eval: /mnt/tb/eval}}
"""


def _fake_tensorboard(tmp_path: Path) -> tuple[Path, Path]:
    """A `tensorboard` on PATH that records its arguments: (its directory, the record)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "tensorboard-args.json"
    fake = bin_dir / "tensorboard"
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    return bin_dir, record


@pytest.mark.parametrize("shell", SHELLS)
def test_tensorboard_starts_on_the_labelled_port_reading_the_log_dirs(
    shell: str, tmp_path: Path
) -> None:
    bin_dir, record = _fake_tensorboard(tmp_path)
    job, _ = _load(_job(TENSORBOARD))
    path = f"{bin_dir}:{os.environ['PATH']}"
    env = {"PATH": path, "SHOAL_PORT_tensorboard": "23456", "SHOAL_TASK_INDEX": "0"}
    assert _run(job.roles[0].command, tmp_path, shell, **env) == (0, ["main"], None)
    for _ in range(100):  # it was started in the background
        if record.exists() and record.read_text():
            break
        subprocess.run(["sleep", "0.05"], check=True)
    assert json.loads(record.read_text()) == [
        "--logdir_spec",
        "train:/mnt/tb/train,eval:/mnt/tb/eval",
        "--port",
        "23456",
        "--bind_all",
    ]


def test_tensorboard_runs_on_the_first_task_only(tmp_path: Path) -> None:
    bin_dir, record = _fake_tensorboard(tmp_path)
    job, _ = _load(_job(TENSORBOARD))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SHOAL_TASK_INDEX": "1"}
    assert _run(job.roles[0].command, tmp_path, **env) == (0, ["main"], None)
    assert not record.exists()


def test_without_tensorboard_installed_the_task_fails_saying_so(tmp_path: Path) -> None:
    job, _ = _load(_job(TENSORBOARD))
    code, lines, said = _run(job.roles[0].command, tmp_path, PATH="/usr/bin:/bin")
    assert (code, lines) == (127, [])
    assert said is not None
    assert said.startswith(
        "runtime plugin tensorboard: `tensorboard` is not installed in the task's environment"
    )


def test_without_tensorboard_and_failure_policy_ignore_the_task_goes_on(tmp_path: Path) -> None:
    plugins = TENSORBOARD.replace(
        "    - plugin: tensorboard\n", "    - plugin: tensorboard\n      failurePolicy: ignore\n"
    )
    job, _ = _load(_job(plugins))
    assert _run(job.roles[0].command, tmp_path, PATH="/usr/bin:/bin") == (0, ["main"], None)
