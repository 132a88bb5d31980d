"""What a test run left on the machine (issue 25, item 7), found at its end by tests/conftest.py:
the task cgroups of its agents, their podman containers, the network namespaces of its labs
(tests/multihost/netns.py) and the processes it started that are still alive.

Only the run's own things are looked at, never another run's on the same machine:

- an agent's cgroups and containers carry its instance name (``shoal.agent.limits.instance_name``
  of its home, in the cgroup path and the container's name and ``shoal.agent`` label), and the
  run's agents' homes are all under its temporary directory (pytest's ``basetemp``);
- a lab's namespaces are named after the pid of the process that made it (the run's pytest
  processes, which tell the controller their pids);
- a process is the run's if it carries the run's token in its environment (``RUN_ENV``, set at
  the start and inherited) or runs in, or names, the run's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from shoal.agent.cgroups import V1_CONTROLLERS, _mounts
from shoal.agent.journal import ATTEMPTS, LEASE_FILE
from shoal.agent.limits import CGROUP_FILE, instance_name
from shoal.agent.workspace import DEFAULT_TASK_ROOT

RUN_ENV = "PYTEST_SHOAL_RUN"  # not SHOAL_*: tests that clean their environment drop those
CGROUP_DEPTH = 8  # how deep below a cgroup mount an agent's directory is looked for


@dataclass
class Leftovers:
    task_roots: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.task_roots or self.cgroups or self.containers or self.namespaces or self.processes
        )

    def lines(self) -> list[str]:
        found = []
        for what, items in (
            ("task roots", self.task_roots),
            ("task cgroups", self.cgroups),
            ("podman containers", self.containers),
            ("network namespaces and links", self.namespaces),
            ("processes", self.processes),
        ):
            if items:
                found.append(f"{len(items)} {what}:")
                found += [f"  {item}" for item in items]
        return found


def agent_homes(root: Path) -> set[Path]:
    """Every agent home under ``root``: a directory with an attempts journal or a lease."""
    homes = set()
    for where, dirs, files in os.walk(root):
        if ATTEMPTS in dirs or LEASE_FILE in files:
            homes.add(Path(where))
    return homes


def instances_under(root: Path) -> set[str]:
    return {instance_name(home) for home in agent_homes(root)}


def recorded_cgroups(root: Path, cgroups: Iterable[Path]) -> list[str]:
    """The cgroups (under the mounts ``cgroups``) that the attempt records under ``root`` name
    (``cgroup.json``, written before the cgroup is made) and that are still there: those of a
    TaskLimiter used without a journal beside it too."""
    mounts = tuple(str(m).rstrip("/") + "/" for m in cgroups)
    found = []
    for where, _, files in os.walk(root):
        if CGROUP_FILE in files:
            try:
                dirs = json.loads((Path(where) / CGROUP_FILE).read_text())["dirs"].values()
            except (OSError, ValueError, KeyError, AttributeError):
                continue
            found += [str(d) for d in dirs if str(d).startswith(mounts) and Path(d).is_dir()]
    return found


def task_roots(instances: set[str]) -> list[str]:
    """The agents' task roots in the machine's default place (shoal.agent.workspace): those of
    agents started without the run's ``SHOAL_TASK_ROOT`` (the run's own is removed at its end)."""
    return sorted(str(DEFAULT_TASK_ROOT / i) for i in instances if (DEFAULT_TASK_ROOT / i).exists())


def cgroup_roots() -> list[Path]:
    """The mounts an agent makes its tasks' cgroups in: the v2 hierarchy, or each v1 one."""
    unified, v1 = _mounts()
    if unified is not None:
        return [unified]
    return sorted({mount for controller, mount in v1.items() if controller in V1_CONTROLLERS})


def task_cgroups(instances: set[str], roots: Iterable[Path]) -> list[str]:
    """The cgroups left in the agents' directories (``<own cgroup>/<instance>/<attempt>``)."""
    found: list[str] = []

    def visit(directory: Path, depth: int) -> None:
        try:
            children = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for child in children:
            if child.name in instances:
                found.extend(sorted(str(Path(child.path) / g.name) for g in _dirs(child.path)))
            elif depth < CGROUP_DEPTH:
                visit(Path(child.path), depth + 1)

    for root in roots:
        visit(root, 1)
    return sorted(found)


def _dirs(path: str) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def containers(instances: set[str], scratch: Path) -> list[str]:
    """The agents' podman containers, in any state (none if podman is not installed)."""
    podman = shutil.which("podman")
    if podman is None or not instances:
        return []
    listed = subprocess.run(
        [podman, "ps", "--all", "--format", "json"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if listed.returncode != 0:
        return [f"podman ps failed: {listed.stderr.strip()[-300:]}"]
    return ours(json.loads(listed.stdout or "[]"), instances)


def ours(listed: list[dict[str, object]], instances: set[str]) -> list[str]:
    """Of ``podman ps --all --format json``, the containers of these agents."""
    found = []
    for container in listed:
        names = [str(n) for n in container.get("Names") or []]  # type: ignore[attr-defined]
        labels = container.get("Labels") or {}
        agent = labels.get("shoal.agent") if isinstance(labels, dict) else None
        if agent in instances or any(n.startswith(f"{i}-") for n in names for i in instances):
            found.append(f"{','.join(names)} ({container.get('State')})")
    return sorted(found)


def lab_tags(pids: Iterable[int]) -> set[str]:
    """The names tests/multihost/netns.py gives the labs (and its probe) of these processes."""
    tags = set()
    for pid in pids:
        tags |= {f"sl{pid % 100000}", f"shp{pid % 100000}"}
    return tags


def namespaces(tags: set[str]) -> list[str]:
    """The labs' namespaces and root-namespace links still there (with their processes)."""
    if shutil.which("ip") is None or not tags:
        return []
    pattern = re.compile(rf"^({'|'.join(map(re.escape, sorted(tags)))})(-sw|-h\d+|-r)?$")
    found = []
    names = _ip("netns", "list").split()
    for name in names:
        if pattern.match(name):
            pids = _ip("netns", "pids", name).split()
            found.append(f"netns {name}" + (f" (processes {' '.join(pids)})" if pids else ""))
    for line in _ip("-o", "link", "show").splitlines():
        parts = line.split(":")
        if len(parts) > 1 and pattern.match(parts[1].strip().split("@")[0]):
            found.append(f"link {parts[1].strip()}")
    return found


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    return done.stdout


def processes(token: str, temp: Path, spared: set[int]) -> list[str]:
    """Live processes of the run: its token in their environment, or its temporary directory in
    their working directory or command line (``spared``: pytest's own, which are not left)."""
    marker = f"{RUN_ENV}={token}".encode()
    where = str(temp).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        base = f"/proc/{entry}"
        try:
            with open(f"{base}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # ended, waiting for its parent: nothing left running
            with open(f"{base}/cmdline", "rb") as handle:
                command = handle.read()
            with open(f"{base}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            cwd = os.readlink(f"{base}/cwd").encode()
        except (OSError, IndexError):
            continue
        if marker in environ or where in command or cwd.startswith(where):
            text = command.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"pid {entry}: {text[:300]}")
    return found


def ancestors() -> set[int]:
    """This process and those above it."""
    found, pid = set(), os.getpid()
    while pid > 1:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                pid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def find(token: str, temp: Path, pytest_pids: Iterable[int]) -> Leftovers:
    """Everything the run with ``token`` and temporary directory ``temp`` left (``pytest_pids``:
    its controller's and workers', which are not leftovers themselves)."""
    pytest_pids = set(pytest_pids)
    instances = instances_under(temp) if temp.is_dir() else set()
    roots = cgroup_roots()
    cgroups = task_cgroups(instances, roots) + recorded_cgroups(temp, roots)
    return Leftovers(
        task_roots=task_roots(instances),
        cgroups=sorted(set(cgroups)),
        containers=containers(instances, temp if temp.is_dir() else Path("/")),
        namespaces=namespaces(lab_tags(pytest_pids)),
        processes=processes(token, temp, ancestors() | pytest_pids),
    )
