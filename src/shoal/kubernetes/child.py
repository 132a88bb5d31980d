"""The Kubernetes agent as a child of ``shoal server start --kubernetes`` (no Kubernetes client is
imported here: the server's process stays as it was).

The child gets the read end of a pipe whose write end only the server holds: when the server
ends, however it ends (kill -9 too), the child reads EOF and stops, so a restarted server never
finds an old agent beside its new one. A child that dies is started again, after 0.5 s doubling
up to 30 s while it keeps dying young (the scheduler process's rule).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("shoal.kubernetes")
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
STEADY_S = 60.0


class AgentChild:
    def __init__(self, server_url: str, token_file: Path, options: list[str], log_file: Path):
        self.argv = [
            sys.executable,
            "-m",
            "shoal",
            "kubernetes",
            "agent",
            "--server",
            server_url,
            "--token-file",
            str(token_file),
            *options,
        ]
        self.log_file = log_file
        self._read, self._write = os.pipe()  # the write end stays open while this process lives
        self._stopping = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._watch, name="shoal-k8s-agent", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_file, "ab") as out:
            return subprocess.Popen(
                [*self.argv, "--watch-fd", str(self._read)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(self._read,),
                start_new_session=True,  # a Ctrl-C at the server's terminal goes to the server
            )

    def _watch(self) -> None:
        delay = FIRST_DELAY_S
        while not self._stopping.is_set():
            started = time.monotonic()
            self._child = self._spawn()
            code = self._child.wait()
            if self._stopping.is_set():
                return
            lived = time.monotonic() - started
            delay = FIRST_DELAY_S if lived > STEADY_S else min(delay * 2, MAX_DELAY_S)
            log.error(
                "the Kubernetes agent exited with %s after %.0fs (see %s); starting it again in "
                "%.1fs",
                code,
                lived,
                self.log_file,
                delay,
            )
            self._stopping.wait(delay)

    def stop(self, timeout: float = 15.0) -> None:
        self._stopping.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
        os.close(self._write)
        os.close(self._read)
