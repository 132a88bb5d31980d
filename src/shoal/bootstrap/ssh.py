"""One SSH connection to one host (asyncssh): run a command, copy files, and start, check or stop
one detached process by its pid file through ``hostctl.py``.

Host keys are always checked against the known-hosts file the cluster file names; only public-key
authentication with the named key is tried (no agent, no password, no ~/.ssh/config), so what
connects is exactly what the cluster file says.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import asyncssh

HOSTCTL = Path(__file__).with_name("hostctl.py")
STDERR_TAIL_LINES = 12


class StepFailed(Exception):
    """A step on a host failed: ``step`` names it, the message says why (with stderr's tail)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.message = message


@dataclass(frozen=True)
class Ran:
    command: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return "\n".join(text[-lines:]) if text else "(no output)"


@dataclass(frozen=True)
class SshTarget:
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    connect_timeout: float = 15.0

    def describe(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def connect_problem(target: SshTarget, exc: BaseException) -> str:
    """A sentence for a failed connection, with what to check."""
    where = target.describe()
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return (
            f"the host key of {where} is not in {target.known_hosts} (or does not match it): "
            f"check the host's fingerprint, then `ssh-keyscan -p {target.port} {target.address} "
            f">> {target.known_hosts}`"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return (
            f"{where} refused the key {target.key_file}: add its public half to "
            f"~{target.user}/.ssh/authorized_keys on the host"
        )
    if isinstance(exc, asyncssh.KeyImportError):
        return f"cannot read the private key {target.key_file}: {exc}"
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot connect to {where}: connection refused (is sshd listening on that port?)"
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot read {exc.filename}: {exc.strerror}"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} within {target.connect_timeout:g}s"
    if isinstance(exc, OSError):
        return f"cannot connect to {where}: {exc.strerror or exc}"
    return f"SSH to {where} failed: {exc}"


class HostSession:
    """An open SSH connection; use ``async with await HostSession.open(target)``."""

    def __init__(self, target: SshTarget, conn: asyncssh.SSHClientConnection) -> None:
        self.target = target
        self._conn = conn

    @classmethod
    async def open(cls, target: SshTarget) -> HostSession:
        try:
            conn = await asyncssh.connect(
                target.address,
                port=target.port,
                username=target.user,
                client_keys=[str(target.key_file)],
                known_hosts=str(target.known_hosts),
                connect_timeout=target.connect_timeout,
                agent_path=None,
                config=[],
                preferred_auth="publickey",
            )
        except (OSError, asyncssh.Error, asyncssh.KeyImportError, TimeoutError) as exc:
            raise StepFailed("connect", connect_problem(target, exc)) from None
        return cls(target, conn)

    async def __aenter__(self) -> HostSession:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._conn.close()
        await self._conn.wait_closed()

    async def run(self, command: str, timeout_s: float = 600.0) -> Ran:
        """Run ``command`` through the user's shell on the host; never raises on a non-zero exit."""
        try:
            done = await asyncio.wait_for(
                self._conn.run(command, check=False, stdin=asyncssh.DEVNULL), timeout_s
            )
        except TimeoutError:
            return Ran(command, 124, "", f"timed out after {timeout_s:g}s: {command}")
        return Ran(
            command,
            done.exit_status if done.exit_status is not None else 255,
            _text(done.stdout),
            _text(done.stderr),
        )

    async def must(self, step: str, command: str, timeout_s: float = 600.0) -> Ran:
        """Run ``command``; a non-zero exit fails ``step`` with stderr's tail."""
        done = await self.run(command, timeout_s)
        if not done.ok:
            raise StepFailed(step, f"`{command}` exited {done.exit_status}:\n{done.tail()}")
        return done

    async def home(self) -> str:
        done = await self.must("connect", 'printf %s "$HOME"')
        return done.stdout

    async def put(self, files: list[Path], remote_dir: str, skip_same_size: bool = False) -> int:
        """Copy ``files`` into ``remote_dir`` (created); returns how many were sent. With
        ``skip_same_size``, a file already there with the same size is not sent again."""
        await self.must("copy", f"mkdir -p {shlex.quote(remote_dir)}")
        sent = 0
        async with self._conn.start_sftp_client() as sftp:
            for local in files:
                remote = f"{remote_dir}/{local.name}"
                if skip_same_size and await _same_size(sftp, remote, local):
                    continue
                await sftp.put(str(local), remote + ".part")
                await sftp.posix_rename(remote + ".part", remote)
                sent += 1
        return sent

    async def put_secret(self, step: str, text: str, remote: str) -> None:
        """Write ``text`` to the file ``remote`` on the host, created anew with mode 0600 (only
        the SSH user reads it) over SFTP: a secret never goes on a command line there."""
        try:
            async with self._conn.start_sftp_client() as sftp:
                with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                    await sftp.remove(remote)
                attrs = asyncssh.SFTPAttrs(permissions=0o600)
                async with sftp.open(remote, "x", attrs=attrs) as file:
                    await file.write(text)
                await sftp.chmod(remote, 0o600)  # whatever the server made of the attributes
        except (asyncssh.Error, OSError) as exc:
            raise StepFailed(step, f"cannot write {remote} on the host: {exc}") from None

    async def remove_quietly(self, remote: str) -> None:
        """Remove ``remote`` on the host if it is there; never raises."""
        with contextlib.suppress(asyncssh.Error, OSError):
            async with self._conn.start_sftp_client() as sftp:
                await sftp.remove(remote)

    # ---- one detached process, by pid file ----

    async def install_hostctl(self, install_dir: str, python: str) -> str:
        await self.put([HOSTCTL], install_dir)
        return f"{shlex.quote(python)} {shlex.quote(install_dir + '/hostctl.py')}"

    async def start_detached(
        self, hostctl: str, pidfile: str, log: str, cwd: str, command: list[str]
    ) -> Ran:
        quoted = " ".join(shlex.quote(part) for part in command)
        line = (
            f"{hostctl} start --pidfile {shlex.quote(pidfile)} --log {shlex.quote(log)} "
            f"--cwd {shlex.quote(cwd)} -- {quoted}"
        )
        done = await self.run(line, timeout_s=60.0)
        if not done.ok:
            log_tail = await self.run(f"tail -n {STDERR_TAIL_LINES} {shlex.quote(log)}")
            raise StepFailed("start", f"{done.tail()}\n{log_tail.stdout.strip()}".strip())
        return done

    async def detached_pid(self, hostctl: str, pidfile: str) -> int | None:
        """The pid if the pid file's process is running, None if not."""
        done = await self.run(f"{hostctl} status --pidfile {shlex.quote(pidfile)}", 60.0)
        words = done.stdout.split()
        if done.ok and len(words) == 2 and words[0] == "running":
            return int(words[1])
        if done.exit_status == 3 or "not running" in done.stdout:
            return None
        raise StepFailed("status", done.tail())

    async def stop_detached(self, hostctl: str, pidfile: str, grace_s: float = 30.0) -> str:
        line = f"{hostctl} stop --pidfile {shlex.quote(pidfile)} --grace {grace_s:g}"
        done = await self.must("stop", line, timeout_s=grace_s + 30.0)
        return done.stdout.strip()


async def _same_size(sftp: asyncssh.SFTPClient, remote: str, local: Path) -> bool:
    if not await sftp.exists(remote):
        return False
    return (await sftp.stat(remote)).size == local.stat().st_size


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value) if value is not None else ""
