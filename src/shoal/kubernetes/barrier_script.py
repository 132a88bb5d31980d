"""The start barrier's sidecar (docs/kubernetes.md, "Start barrier"): Python's standard library
only, run as ``python3 -c`` in the task's image (or the agent's ``--helper-image``).

It listens on ``SHOAL_BARRIER_PORT`` for the Pod's whole life, and connects to that port on every
address of the job's hostfile (``SHOAL_BARRIER_HOSTFILE``; an ``address:port`` line names its own
port) until each one answers. ``GET /ready`` answers 503 until then and 200 after: the sidecar's
startup probe, so the kubelet starts the task's container only once every peer's Pod is up and
reachable over the network, not merely named in DNS. Since the listener stays up until the Pod
ends, a peer that is slower never waits for a barrier that has gone.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import sys
import threading
import time


def peers(hostfile: str, port: int) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    with open(hostfile) as lines:
        for line in lines:
            words = line.split()
            if not words:
                continue
            host, _, own_port = words[0].rpartition(":") if ":" in words[0] else (words[0], "", "")
            found.append((host, int(own_port) if own_port else port))
    return found


def answers(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1.0).close()
        return True
    except OSError:
        return False


def main() -> int:
    port = int(os.environ["SHOAL_BARRIER_PORT"])
    ready = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fine = self.path != "/ready" or ready.is_set()
            self.send_response(200 if fine else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    waiting = peers(os.environ["SHOAL_BARRIER_HOSTFILE"], port)
    began = time.monotonic()
    print(f"shoal barrier: waiting for {len(waiting)} peers on port {port}", flush=True)
    while waiting:
        waiting = [peer for peer in waiting if not answers(peer)]
        if waiting:
            time.sleep(0.5)
    print(f"shoal barrier: every peer answers after {time.monotonic() - began:.1f}s", flush=True)
    ready.set()
    threading.Event().wait()  # the listener lives as long as the Pod
    return 0


if __name__ == "__main__":
    sys.exit(main())
