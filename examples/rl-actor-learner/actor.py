"""An actor: finds the learner through $SHOAL_LEARNER_HOSTS, runs episodes with the weights it
receives, and streams them back, until the learner says stop."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import numpy as np

from corridor import run_episode


def connect(host: str, port: int, timeout_s: float = 60.0) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=120)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the learner may still be starting: every task starts at once


def main() -> int:
    learner = os.environ["SHOAL_LEARNER_HOSTS"].split(",")[0]
    host, port = learner.rsplit(":", 1)
    index = int(os.environ["SHOAL_TASK_INDEX"])
    rng = np.random.default_rng(1000 + index)
    conn = connect(host, int(port))
    reader, writer = conn.makefile("r"), conn.makefile("w")
    print(f"actor {index} connected to learner at {learner}", flush=True)
    sent = 0
    for line in reader:
        message = json.loads(line)
        if message.get("stop"):
            break
        weights = np.array(message["weights"])
        episodes = [run_episode(weights, rng) for _ in range(message["episodes"])]
        writer.write(json.dumps({"episodes": episodes}) + "\n")
        writer.flush()
        sent += len(episodes)
    print(f"actor {index} done after {sent} episodes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
