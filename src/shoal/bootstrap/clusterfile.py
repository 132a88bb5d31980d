"""The cluster file of ``shoal cluster create|status|delete`` and its commented template.

Problems name the field by its path in the file (``hosts[1].port: must be an integer <= 65535,
got 70000``), with the line, like the job-file problems (``shoal.spec.diagnostics``); every
problem of a file is reported at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shoal.spec.diagnostics import validate_collecting
from shoal.spec.errors import ProblemCollector, SpecError, SpecProblem
from shoal.spec.source import parse_document, read_settings_file
from shoal.spec.units import CPU_HINT, MEMORY_HINT, cpu_millis, memory_mib

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9._/:-]{0,63}$")
# A host name or an IPv4/IPv6 address: no spaces, no shell or option characters.
ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
# The install directory goes into shell commands on the host: keep it plain.
INSTALL_DIR = re.compile(r"^(~|~/[A-Za-z0-9._/-]*|/[A-Za-z0-9._/-]*)$")
SSH_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")


def _address(value: str) -> str:
    if not ADDRESS.match(value):
        raise ValueError(
            f"must be a host name or an IP address (letters, digits, '.', ':', '-'), got {value!r}"
        )
    return value


class ServerSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str
    port: int = Field(8443, ge=1, le=65535)
    home: str = "~/.shoal-cluster"

    _check_address = field_validator("address")(_address)


class SshDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str = "root"
    key_file: str = "~/.ssh/id_ed25519"
    port: int = Field(22, ge=1, le=65535)
    known_hosts: str = "~/.ssh/known_hosts"
    connect_timeout: float = Field(15.0, gt=0, le=600)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not SSH_USER.match(value):
            raise ValueError(f"must be a user name such as 'root' or 'ubuntu', got {value!r}")
        return value


class HostEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str
    name: str | None = None
    user: str | None = None
    key_file: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    labels: dict[str, str] = Field(default_factory=dict)
    cpus: int | float | str | None = None
    memory: int | str | None = None
    gpus: int | None = Field(None, ge=0, le=64)
    port_base: int | None = Field(None, ge=1024, le=64000)  # first of the node's 1,000 task ports
    # where its peers reach its tasks; None: what `shoal agent join` picks on the host (the
    # address the host reaches the server from)
    advertise_address: str | None = None

    _check_address = field_validator("address")(_address)

    @field_validator("advertise_address")
    @classmethod
    def _advertise_address(cls, value: str | None) -> str | None:
        return None if value is None else _address(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not NODE_NAME.match(value):
            raise ValueError(
                "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit, "
                f"got {value!r}"
            )
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return None if value is None else SshDefaults._user(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not LABEL_KEY.match(key):
                raise ValueError(f"label key {key!r} must be letters, digits, '.', '_', '/', '-'")
            if not LABEL_VALUE.match(text):
                raise ValueError(
                    f"label {key}={text!r}: values are letters, digits, '.', '_', '/', ':', '-'"
                )
        return value

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: float | str | None) -> float | str | None:
        if value is not None and cpu_millis(value) <= 0:
            raise ValueError(f"must be more than 0 cores, got {value!r}")
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            memory_mib(value)
        return value


class ClusterDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: ServerSection
    install_dir: str = "~/.shoal-agent"
    python: str = "python3"
    ssh: SshDefaults = Field(default_factory=SshDefaults)
    hosts: list[HostEntry] = Field(min_length=1)

    @field_validator("install_dir")
    @classmethod
    def _install_dir(cls, value: str) -> str:
        if not INSTALL_DIR.match(value) or "/../" in f"{value}/":
            raise ValueError(
                "must be an absolute path or start with ~ (letters, digits, '.', '_', '/', '-'), "
                f"got {value!r}"
            )
        return value.rstrip("/") or "/"

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9._/-]+$", value):
            raise ValueError(f"must be a command such as 'python3' or a path, got {value!r}")
        return value


@dataclass(frozen=True)
class HostPlan:
    """One host with the defaults filled in and local paths resolved."""

    index: int  # its position in ``hosts`` (for messages naming the field)
    address: str
    name: str
    user: str
    key_file: Path
    port: int
    labels: dict[str, str]
    cpus: str | None
    memory_mib: int | None
    gpus: int | None
    port_base: int | None
    key_field: str  # where key_file came from: `hosts[i].key_file` or `ssh.key_file`
    advertise_address: str | None = None  # None: `shoal agent join` picks it on the host

    @property
    def field(self) -> str:
        return f"hosts[{self.index}]"

    @property
    def label_arg(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


@dataclass(frozen=True)
class Cluster:
    path: Path
    server_address: str
    server_port: int
    server_home: Path
    install_dir: str  # as written: a host path, `~` expanded by the host's shell
    python: str
    known_hosts: Path
    connect_timeout: float
    hosts: tuple[HostPlan, ...]

    @property
    def server_url(self) -> str:
        host = f"[{self.server_address}]" if ":" in self.server_address else self.server_address
        return f"https://{host}:{self.server_port}"


def template_text() -> str:
    return (resources.files("shoal.bootstrap") / "template.yaml").read_text(encoding="utf-8")


def load_cluster(path: Path) -> Cluster:
    """Read and validate a cluster file; :class:`SpecError` lists every problem with its field."""
    return parse_cluster(read_settings_file(path), path)


def parse_cluster(text: str, path: Path) -> Cluster:
    loaded = parse_document(text)
    problems = ProblemCollector()
    document = validate_collecting(ClusterDocument, loaded.data, problems)
    if document is not None:
        _cross_checks(document, problems)
    if problems.errors:
        raise SpecError(_with_lines(problems.errors, loaded.line_of))
    assert document is not None
    return _resolve(document, path)


def _cross_checks(document: ClusterDocument, problems: ProblemCollector) -> None:
    seen_names: dict[str, int] = {}
    seen_targets: dict[tuple[str, int], int] = {}
    for index, host in enumerate(document.hosts):
        name = host.name or default_node_name(host.address)
        if name in seen_names:
            problems.error(
                f"hosts[{index}].name",
                f"node name {name!r} is already used by hosts[{seen_names[name]}]",
                "give each host its own name",
            )
        seen_names.setdefault(name, index)
        target = (host.address, host.port or document.ssh.port)
        if target in seen_targets:
            problems.error(
                f"hosts[{index}].address",
                f"{target[0]} port {target[1]} is already listed as hosts[{seen_targets[target]}]",
                "list each host once",
            )
        seen_targets.setdefault(target, index)


def _with_lines(found: list[SpecProblem], line_of: dict[str, int]) -> list[SpecProblem]:
    placed = []
    for problem in found:
        line = line_of.get(problem.path)
        hint = problem.hint
        if hint is None and problem.path.endswith(".memory"):
            hint = MEMORY_HINT
        elif hint is None and problem.path.endswith(".cpus"):
            hint = CPU_HINT
        placed.append(SpecProblem(problem.path, problem.message, hint, line))
    return placed


def default_node_name(address: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", address).strip("-") or "node"


def _local_path(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else (base / path)


def _resolve(document: ClusterDocument, path: Path) -> Cluster:
    base = path.resolve().parent
    ssh = document.ssh
    hosts = tuple(
        HostPlan(
            index=index,
            address=host.address,
            name=host.name or default_node_name(host.address),
            user=host.user or ssh.user,
            key_file=_local_path(host.key_file or ssh.key_file, base),
            port=host.port or ssh.port,
            labels=dict(host.labels),
            cpus=None if host.cpus is None else str(host.cpus),
            memory_mib=None if host.memory is None else memory_mib(host.memory),
            gpus=host.gpus,
            port_base=host.port_base,
            key_field=f"hosts[{index}].key_file" if host.key_file else "ssh.key_file",
            advertise_address=host.advertise_address,
        )
        for index, host in enumerate(document.hosts)
    )
    return Cluster(
        path=path,
        server_address=document.server.address,
        server_port=document.server.port,
        server_home=_local_path(document.server.home, base),
        install_dir=document.install_dir,
        python=document.python,
        known_hosts=_local_path(ssh.known_hosts, base),
        connect_timeout=ssh.connect_timeout,
        hosts=hosts,
    )


def missing_local_files(cluster: Cluster) -> list[SpecProblem]:
    """Key files and the known-hosts file that do not exist here (checked before connecting)."""
    found: list[SpecProblem] = []
    if not cluster.known_hosts.is_file():
        found.append(
            SpecProblem(
                "ssh.known_hosts",
                f"no such file {cluster.known_hosts}",
                "create it with `ssh-keyscan -p PORT ADDRESS >> FILE` for each host",
            )
        )
    for host in cluster.hosts:
        if not host.key_file.is_file():
            found.append(
                SpecProblem(
                    host.key_field,
                    f"no such private key file {host.key_file}",
                    "point it at the key whose public half is in the host's authorized_keys",
                )
            )
    return found
