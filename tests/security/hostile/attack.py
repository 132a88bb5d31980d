"""A hostile task (tests/security): tries, one by one, to break out of its user's reach on its node,
and prints one JSON line per attempt: {"attempt": name, "outcome": "refused: ..." | "DONE: ..."}.

Standard library only: it runs on Debian's /usr/bin/python3, in a process task or in a container.
What it aims at comes in its environment (the test looked it up as root): the agent's home and
files, the victim's pid, directory and logs, the node's cached code and data, the GPU devices.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import ssl
import sys
import urllib.request

PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def outcome(name: str, action) -> None:  # type: ignore[no-untyped-def]
    try:
        result = action()
        said = f"DONE: {result!r}"[:200]
    except Exception as exc:  # every refusal is an outcome
        said = f"refused: {type(exc).__name__}: {exc}"[:200]
    print(json.dumps({"attempt": name, "outcome": said}), flush=True)


def read(path: str) -> str:
    with open(path, "rb") as handle:
        return handle.read(64).hex()


def append(path: str) -> str:
    with open(path, "a") as handle:
        handle.write("9999999999\n")
    return "appended"


def overwrite(path: str) -> str:
    with open(path, "r+b") as handle:
        handle.write(b"tampered")
    return "overwritten"


def replace(path: str) -> str:
    """Swap the file for another through its directory (unlink, then create)."""
    os.unlink(path)
    with open(path, "wb") as handle:
        handle.write(b"tampered")
    return "replaced"


def create_in(directory: str) -> str:
    with open(os.path.join(directory, "planted.json"), "w") as handle:
        handle.write("{}")
    return "planted"


def ptrace(pid: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    libc.ptrace(PTRACE_DETACH, pid, None, None)
    return "attached"


def open_device(path: str) -> str:
    fd = os.open(path, os.O_RDWR)
    os.close(fd)
    return "opened"


def present_node_certificate(server: str, cert: str, key: str, ca: str) -> str:
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    with urllib.request.urlopen(f"{server}/api/v1/agent/whoami", context=context, timeout=5) as r:
        return r.read(100).decode()


def main() -> int:
    env = os.environ
    home, victim = env["T_AGENT_HOME"], int(env["T_VICTIM_PID"])
    print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}))
    outcome("read the node key", lambda: read(f"{home}/identity/node.key"))
    outcome("read the node certificate", lambda: read(f"{home}/identity/node.crt"))
    outcome("write the lease", lambda: append(f"{home}/lease"))
    outcome("write the journal", lambda: create_in(f"{home}/attempts"))
    outcome("replace the cached code archive", lambda: overwrite(env["T_CODE_ARCHIVE"]))
    outcome("overwrite the cached data file", lambda: overwrite(env["T_DATA_FILE"]))
    outcome("replace the cached data file", lambda: replace(env["T_DATA_FILE"]))
    outcome("list the victim's directory", lambda: os.listdir(env["T_VICTIM_DIR"]))
    outcome("read the victim's file", lambda: read(f"{env['T_VICTIM_DIR']}/secret.txt"))
    outcome("read the victim's log", lambda: read(env["T_VICTIM_LOG"]))
    outcome("read the victim's environ", lambda: read(f"/proc/{victim}/environ"))
    outcome("signal the victim", lambda: os.kill(victim, signal.SIGTERM))
    outcome("ptrace the victim", lambda: ptrace(victim))
    outcome("open a GPU not given", lambda: open_device(env["T_OTHER_GPU"]))
    outcome(
        "present the node certificate",
        lambda: present_node_certificate(
            env["T_SERVER"],
            f"{home}/identity/node.crt",
            f"{home}/identity/node.key",
            f"{home}/identity/ca.crt",
        ),
    )
    # a control: its own GPU's device may be opened (the kernel then says there is no such
    # device: these are simulated), so a refusal above is the device cgroup's
    outcome("open its own GPU (control)", lambda: open_device(env["T_OWN_GPU"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
