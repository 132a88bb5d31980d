"""The per-host steps of ``shoal cluster create``, ``status`` and ``delete``.

On each host, under the install directory::

    hostctl.py      start/stop/status by pid file (stdlib only, run with the host's python)
    wheels/         shoal's wheel and its dependencies' wheels (copied; same size: not re-sent)
    venv/           python -m venv; pip install --no-index --find-links wheels/
    installed       sha256 of the shoal wheel installed in venv/ (same: not reinstalled)
    home/           the agent's home: identity/ (from `shoal agent join`) and task files
    joined          the node name, written once `shoal agent join` succeeded
    join.token      the join token (0600) while `shoal agent join` runs, then removed
    agent.pid       pid and start time of `shoal agent run` (started detached)
    agent.log       its output

Each step that fails raises :class:`StepFailed` naming the step, with stderr's tail.
"""

from __future__ import annotations

import asyncio
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from shoal.agent.identity import IDENTITY_DIR
from shoal.bootstrap.clusterfile import Cluster, HostPlan
from shoal.bootstrap.server import LocalServer, ServerProblem
from shoal.bootstrap.ssh import HostSession, SshTarget, StepFailed
from shoal.bootstrap.wheels import Payload

Say = Callable[[HostPlan, str], None]
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Layout:
    root: str
    python: str  # the host's interpreter, for hostctl and the venv

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def q(self, name: str) -> str:
        return shlex.quote(self.path(name))

    @property
    def hostctl(self) -> str:
        return f"{shlex.quote(self.python)} {self.q('hostctl.py')}"

    @property
    def shoal(self) -> str:
        return self.q("venv/bin/shoal")


@dataclass
class HostOutcome:
    host: HostPlan
    ok: bool
    summary: str
    failed_step: str | None = None


def target_of(cluster: Cluster, host: HostPlan) -> SshTarget:
    return SshTarget(
        host.address, host.port, host.user, host.key_file, cluster.known_hosts,
        cluster.connect_timeout,
    )  # fmt: skip


async def open_host(cluster: Cluster, host: HostPlan) -> tuple[HostSession, Layout]:
    session = await HostSession.open(target_of(cluster, host))
    home = await session.home()
    root = cluster.install_dir
    if root == "~" or root.startswith("~/"):
        root = home + root[1:]
    return session, Layout(root, cluster.python)


async def _read(session: HostSession, layout: Layout, name: str) -> str | None:
    done = await session.run(f"cat {layout.q(name)}")
    return done.stdout.strip() if done.ok else None


async def _in_thread(step: str, call: Callable[[], object]) -> object:
    try:
        return await asyncio.to_thread(call)
    except ServerProblem as exc:
        raise StepFailed(step, str(exc)) from None


# ---- create ----


async def create_host(
    cluster: Cluster, host: HostPlan, payload: Payload, server: LocalServer, say: Say
) -> HostOutcome:
    try:
        session, layout = await open_host(cluster, host)
    except StepFailed as exc:
        return HostOutcome(host, False, exc.message, exc.step)
    async with session:
        try:
            return await _create_steps(session, layout, host, payload, server, say)
        except StepFailed as exc:
            return HostOutcome(host, False, exc.message, exc.step)


async def _create_steps(
    session: HostSession,
    layout: Layout,
    host: HostPlan,
    payload: Payload,
    server: LocalServer,
    say: Say,
) -> HostOutcome:
    say(host, f"connected ({session.target.describe()}), install dir {layout.root}")
    await session.must("connect", f"mkdir -p {shlex.quote(layout.root)}")
    await session.install_hostctl(layout.root, layout.python)
    joined = await _read(session, layout, "joined")
    running = await session.detached_pid(layout.hostctl, layout.path("agent.pid"))
    if joined == host.name and running is not None:
        state = str(await _in_thread("ready", lambda: server.node_state(host.name)))
        if state == "READY":
            say(host, f"already joined and running (agent pid {running}): skipped")
            return HostOutcome(host, True, f"already joined, agent pid {running}")
    await _check_python(session, layout)
    await _copy(session, layout, payload, say, host)
    await _install(session, layout, payload, say, host)
    if joined != host.name:
        await _join(session, layout, host, server, say)
    pid = await _start_agent(session, layout, say, host)
    await _wait_ready(session, layout, host, server, say)
    how = "joined" if joined != host.name else "joined before, agent restarted"
    return HostOutcome(host, True, f"{how}, agent pid {pid}")


async def _check_python(session: HostSession, layout: Layout) -> None:
    probe = "import sys, platform; print(*sys.version_info[:2], platform.machine())"
    done = await session.must(
        "check python", f"{shlex.quote(layout.python)} -c {shlex.quote(probe)}"
    )
    here = f"{sys.version_info[0]} {sys.version_info[1]} {platform.machine()}"
    if done.stdout.strip() != here:
        raise StepFailed(
            "check python",
            f"{layout.python} on the host is Python {done.stdout.strip()!r}, this machine "
            f"{here!r}: the wheels copied over are built for this machine; set `python:` to an "
            f"interpreter of Python {sys.version_info[0]}.{sys.version_info[1]}",
        )
    await session.must(
        "check python",
        f"{shlex.quote(layout.python)} -c 'import venv, ensurepip'",
    )


async def _copy(
    session: HostSession, layout: Layout, payload: Payload, say: Say, host: HostPlan
) -> None:
    started = time.monotonic()
    sent = await session.put(list(payload.dependencies), layout.path("wheels"), skip_same_size=True)
    await session.put([payload.shoal_wheel], layout.path("wheels"))
    say(host, f"copy: {sent + 1} wheel(s) sent ({time.monotonic() - started:.1f}s)")


async def _install(
    session: HostSession, layout: Layout, payload: Payload, say: Say, host: HostPlan
) -> None:
    if await _read(session, layout, "installed") == payload.sha256:
        say(host, "install: this shoal wheel is installed already")
        return
    started = time.monotonic()
    pip = f"{layout.q('venv/bin/python')} -m pip install --quiet --no-index"
    wheel = shlex.quote(f"{layout.path('wheels')}/{payload.shoal_wheel.name}")
    await session.must(
        "install",
        f"test -x {layout.q('venv/bin/python')} || "
        f"{shlex.quote(layout.python)} -m venv {layout.q('venv')}",
    )
    await session.must("install", f"{pip} --find-links {layout.q('wheels')} {wheel}")
    await session.must("install", f"{pip} --no-deps --force-reinstall {wheel}")
    await session.must("install", f"echo {payload.sha256} > {layout.q('installed')}")
    say(
        host,
        f"install: shoal installed in {layout.path('venv')} ({time.monotonic() - started:.1f}s)",
    )


JOIN_TOKEN_FILE = "join.token"


def join_arguments(host: HostPlan, server_url: str, token_file: str, agent_home: str) -> list[str]:
    """``shoal agent join``'s arguments: the token is read from ``token_file`` (never on the
    command line, where the host's other users would see it in ``ps``); the address the node
    advertises is the cluster file's ``advertise_address``, else join's own choice (the address
    the host reaches the server from)."""
    args = ["agent", "join", server_url, "--token-file", token_file, "--name", host.name]
    args += ["--home", agent_home]
    if host.advertise_address is not None:
        args += ["--address", host.advertise_address]
    if host.labels:
        args += ["--labels", host.label_arg]
    if host.cpus is not None:
        args += ["--cpus", host.cpus]
    if host.memory_mib is not None:
        args += ["--memory", str(host.memory_mib)]
    if host.gpus is not None:
        args += ["--gpus", str(host.gpus)]
    if host.port_base is not None:
        args += ["--port-base", str(host.port_base)]
    return args


def join_command(layout: Layout, host: HostPlan, server_url: str) -> str:
    """The shell line that joins the host with the token in ``INSTALL/join.token`` (put there
    beforehand, 0600) and removes that file whatever the join did, keeping the join's status."""
    token_file = layout.path(JOIN_TOKEN_FILE)
    args = join_arguments(host, server_url, token_file, layout.path("home"))
    join = " ".join([layout.shoal, *(shlex.quote(a) for a in args)])
    script = f"{join}; rc=$?; rm -f {shlex.quote(token_file)}; exit $rc"
    return f"sh -c {shlex.quote(script)}"  # POSIX sh, whatever the SSH user's shell is


async def _join(
    session: HostSession, layout: Layout, host: HostPlan, server: LocalServer, say: Say
) -> None:
    token = str(await _in_thread("join", server.join_token))
    server_url = f"https://{server.address}:{server.port}"
    token_file = layout.path(JOIN_TOKEN_FILE)
    try:
        await session.put_secret("join", token + "\n", token_file)
        done = await session.run(join_command(layout, host, server_url), timeout_s=120.0)
    finally:  # the command removes it; this is for a join that timed out or a lost connection
        await session.remove_quietly(token_file)
    if not done.ok:
        raise StepFailed("join", f"`shoal agent join` exited {done.exit_status}:\n{done.tail()}")
    await session.must("join", f"echo {shlex.quote(host.name)} > {layout.q('joined')}")
    advertising = next(
        (line for line in done.stdout.splitlines() if line.startswith("advertising ")), None
    )
    said = f"; {advertising}" if advertising else ""
    say(host, f"join: node {host.name} joined {server_url}{said}")


async def _start_agent(session: HostSession, layout: Layout, say: Say, host: HostPlan) -> int:
    command = [layout.path("venv/bin/shoal"), "agent", "run", "--home", layout.path("home")]
    done = await session.start_detached(
        layout.hostctl, layout.path("agent.pid"), layout.path("agent.log"), layout.root, command
    )
    pid = int(done.stdout.split()[-1])
    say(host, f"start: agent {done.stdout.strip()} (pid file {layout.path('agent.pid')})")
    return pid


async def _wait_ready(
    session: HostSession, layout: Layout, host: HostPlan, server: LocalServer, say: Say
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    state = "ABSENT"
    while time.monotonic() < deadline:
        state = str(await _in_thread("ready", lambda: server.node_state(host.name)))
        if state == "READY":
            say(host, f"ready: node {host.name} is READY")
            return
        await asyncio.sleep(0.5)
    log = await session.run(f"tail -n 12 {layout.q('agent.log')}")
    raise StepFailed(
        "ready",
        f"node {host.name} is {state} after {READY_TIMEOUT_S:.0f}s; agent.log:\n{log.stdout}",
    )


# ---- status ----


@dataclass(frozen=True)
class HostStatus:
    host: HostPlan
    reachable: str  # "yes" or why not
    agent: str  # "running PID", "not running", "not installed", "-"
    node: str  # the node's state on the server, ABSENT, or why it is unknown


async def status_host(cluster: Cluster, host: HostPlan, nodes: dict[str, str] | str) -> HostStatus:
    node = nodes if isinstance(nodes, str) else nodes.get(host.name, "ABSENT")
    try:
        session, layout = await open_host(cluster, host)
    except StepFailed as exc:
        return HostStatus(host, f"no: {exc.message}", "-", node)
    async with session:
        if not (await session.run(f"test -f {layout.q('hostctl.py')}")).ok:
            return HostStatus(host, "yes", "not installed", node)
        try:
            pid = await session.detached_pid(layout.hostctl, layout.path("agent.pid"))
        except StepFailed as exc:
            return HostStatus(host, "yes", f"unknown: {exc.message}", node)
        return HostStatus(host, "yes", "not running" if pid is None else f"running {pid}", node)


# ---- delete ----


async def delete_host(
    cluster: Cluster, host: HostPlan, server: LocalServer, say: Say
) -> HostOutcome:
    """Stop the agent create started (by its pid file), forget the node's identity on the host
    (task files and the venv stay), and remove the node from the server."""
    try:
        session, layout = await open_host(cluster, host)
    except StepFailed as exc:
        return HostOutcome(host, False, exc.message, exc.step)
    async with session:
        try:
            if (await session.run(f"test -f {layout.q('hostctl.py')}")).ok:
                stopped = await session.stop_detached(layout.hostctl, layout.path("agent.pid"))
                say(host, f"stop: agent {stopped}")
            identity = layout.q(f"home/{IDENTITY_DIR}")
            await session.must("forget", f"rm -rf {identity} {layout.q('joined')}")
        except StepFailed as exc:
            return HostOutcome(host, False, exc.message, exc.step)
    if not server.answering():
        return HostOutcome(
            host,
            False,
            f"the server does not answer on {server.address}:{server.port}, so node {host.name} "
            "is still on its records: start the server and run delete again",
            "remove",
        )
    try:
        if host.name in await asyncio.to_thread(server.nodes):
            await asyncio.to_thread(server.remove_node, host.name)
            say(host, f"remove: node {host.name} removed from the server")
    except ServerProblem as exc:
        return HostOutcome(host, False, str(exc), "remove")
    return HostOutcome(host, True, "agent stopped, node removed")
