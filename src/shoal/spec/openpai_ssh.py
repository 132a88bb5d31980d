"""OpenPAI's ``ssh`` runtime plugin (``openpai-runtime:src/plugins/ssh``), as shoal runs it.

```yaml
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters:
        jobssh: true          # the job's tasks can ssh to each other (ROLE-INDEX)
        userssh: {type: custom, value: "ssh-ed25519 AAAA..."}  # one more key that may log in
        sshbarrier: true      # wait until every task answers ssh before the commands
        sshbarrierTimeout: 30 # minutes (OpenPAI's default)
```

Reading the job file (pure, so it may be cached): every role the plugin applies to gets a port
labelled ``ssh``, the settings in its variables (``SHOAL_SSH_*``), the setup script
(``shoal.spec.openpai_ssh_script``) and, as the first line of its command, the call of that script
with the job's two private keys as secret references. The server makes the keys when the job is
submitted (``shoal.server.services.job_ssh``): a job key (task to task) and a host key (every
task's sshd), both kept with the job's secrets, filled in by the agent when a task starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal.spec.diagnostics import describe
from shoal.spec.errors import ProblemCollector
from shoal.spec.model import JobSpec, Resources, TaskRoleSpec
from shoal.spec.openpai_ssh_script import SETUP_SCRIPT

if TYPE_CHECKING:
    from shoal.spec.openpai_plugins import ReadPlugin

PLUGIN = "ssh"
PORT_LABEL = "ssh"
JOB_KEY_SECRET = "shoal_ssh_job_key"
HOST_KEY_SECRET = "shoal_ssh_host_key"
SETUP_VAR = "SHOAL_SSH_SETUP"
JOBSSH_VAR = "SHOAL_SSH_JOBSSH"
BARRIER_VAR = "SHOAL_SSH_BARRIER_S"
CUSTOM_KEY_VAR = "SHOAL_SSH_CUSTOM_KEY"
# set by the server when the job is submitted (public halves and the user's registered keys)
AUTHORIZED_KEYS_VAR = "SHOAL_SSH_AUTHORIZED_KEYS"
HOST_PUBLIC_KEY_VAR = "SHOAL_SSH_HOST_PUBLIC_KEY"
JOB_PUBLIC_KEY_VAR = "SHOAL_SSH_JOB_PUBLIC_KEY"
DEFAULT_BARRIER_MINUTES = 30
PARAMETERS = ("jobssh", "userssh", "sshbarrier", "sshbarrierTimeout", "sshbarriertaskroles")
PRELUDE = (
    f"shoal_ssh_job_key='<% $secrets.{JOB_KEY_SECRET} %>' "
    f"shoal_ssh_host_key='<% $secrets.{HOST_KEY_SECRET} %>'; "
    f'eval "${SETUP_VAR}"'
)


@dataclass(frozen=True, slots=True)
class SshSettings:
    jobssh: bool = False
    barrier_s: int | None = None  # None: no barrier
    custom_key: str | None = None  # userssh {type: custom, value}


def read_settings(
    parameters: Mapping[str, Any], path: str, problems: ProblemCollector
) -> SshSettings:
    """The plugin's parameters, checked as OpenPAI's runtime read them."""
    where = f"{path}.parameters"
    for key in parameters:
        if key not in PARAMETERS:
            problems.warn(
                f"{where}.{key}",
                "is not a parameter of the ssh plugin; ignored",
                "known: " + ", ".join(PARAMETERS),
            )
    jobssh = _flag(parameters, "jobssh", where, problems)
    barrier = _flag(parameters, "sshbarrier", where, problems)
    if barrier and not jobssh:
        problems.warn(f"{where}.sshbarrier", "only acts with jobssh: true (as in OpenPAI)")
    if "sshbarriertaskroles" in parameters:
        problems.warn(
            f"{where}.sshbarriertaskroles",
            "is not read: the barrier waits for every task of the job",
        )
    minutes = parameters.get("sshbarrierTimeout", DEFAULT_BARRIER_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        problems.error(
            f"{where}.sshbarrierTimeout", f"must be a number of minutes, got {describe(minutes)}"
        )
        minutes = DEFAULT_BARRIER_MINUTES
    return SshSettings(
        jobssh=jobssh,
        barrier_s=int(minutes * 60) if barrier and jobssh else None,
        custom_key=_user_key(parameters.get("userssh"), f"{where}.userssh", problems),
    )


def _flag(parameters: Mapping[str, Any], key: str, where: str, problems: ProblemCollector) -> bool:
    value = parameters.get(key, False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"  # OpenPAI's runtime compared str(value).lower()
    if not isinstance(value, bool):
        problems.error(f"{where}.{key}", f"must be true or false, got {describe(value)}")
        return False
    return value


def _user_key(value: Any, path: str, problems: ProblemCollector) -> str | None:
    if value in (None, {}, ""):
        return None
    if not isinstance(value, dict):
        problems.error(path, f"must be {{type: custom, value: PUBLIC_KEY}}, got {describe(value)}")
        return None
    kind, key = value.get("type"), value.get("value")
    if kind == "system":
        problems.warn(
            f"{path}.type",
            "system keys are the user's registered keys, which every task of the job accepts "
            "anyway; the value is not read",
            "register a key with `shoal user key add FILE`",
        )
        return None
    if kind != "custom":
        problems.error(f"{path}.type", f"must be custom or system, got {describe(kind)}")
        return None
    if not isinstance(key, str) or len(key.split()) < 2 or "\n" in key.strip():
        problems.error(
            f"{path}.value",
            f"must be one public key line (TYPE BASE64 [COMMENT]), got {describe(key)}",
            "the content of a .pub file, such as ~/.ssh/id_ed25519.pub",
        )
        return None
    return key.strip()


def with_ssh_plugins(spec: JobSpec, plugins: Iterable[ReadPlugin]) -> JobSpec:
    """``spec`` with every ``ssh`` plugin of the list (read, and checked, by the plugins'
    handler, ``openpai_plugins``) in the roles it applies to."""
    for read in plugins:
        if read.config.name == PLUGIN:
            quiet = ProblemCollector()  # said once already, when the list was read
            settings = read_settings(read.config.parameters, read.config.path, quiet)
            spec = with_ssh(spec, settings, read.config.roles)
    return spec


def with_ssh(spec: JobSpec, settings: SshSettings, roles: frozenset[str] | None) -> JobSpec:
    """``spec`` with the plugin in the tasks of ``roles`` (None: every role)."""
    changed = tuple(
        _role_with_ssh(role, settings) if roles is None or role.name in roles else role
        for role in spec.roles
    )
    return spec.model_copy(update={"roles": changed})


def _role_with_ssh(role: TaskRoleSpec, settings: SshSettings) -> TaskRoleSpec:
    env = {
        **role.env,
        SETUP_VAR: SETUP_SCRIPT,
        JOBSSH_VAR: "true" if settings.jobssh else "false",
    }
    if settings.barrier_s is not None:
        env[BARRIER_VAR] = str(settings.barrier_s)
    if settings.custom_key is not None:
        env[CUSTOM_KEY_VAR] = settings.custom_key
    ports = {**role.resources.ports}
    ports.setdefault(PORT_LABEL, 1)
    resources: Resources = role.resources.model_copy(update={"ports": ports})
    command = f"{PRELUDE}\n{role.command}"
    return role.model_copy(update={"env": env, "resources": resources, "command": command})


def uses_ssh(spec: JobSpec) -> bool:
    """Whether any role of the job runs the ssh plugin (and so needs the job's keys)."""
    return any(SETUP_VAR in role.env for role in spec.roles)


def ssh_roles(spec: JobSpec) -> list[TaskRoleSpec]:
    return [role for role in spec.roles if SETUP_VAR in role.env]
