"""The learner: serves the policy to actors and improves it from the episodes they send back.

Protocol (JSON lines over TCP): learner -> actor {"weights": [[...]], "episodes": k} or
{"stop": true}; actor -> learner {"episodes": [{"steps": [[s, a, r], ...], "return": x}, ...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import numpy as np

from corridor import N_ACTIONS, N_CELLS, reinforce_gradient

GOAL_RETURN = 0.8  # a near-optimal walk: 11 steps right gives 1 - 10 * 0.01 = 0.90


def accept_actors(server: socket.socket, count: int, timeout_s: float = 120.0) -> list:
    server.settimeout(timeout_s)
    actors = []
    while len(actors) < count:
        conn, address = server.accept()
        actors.append((conn, conn.makefile("r"), conn.makefile("w")))
        print(f"actor connected from {address[0]}:{address[1]} ({len(actors)}/{count})", flush=True)
    return actors


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--episodes-per-actor", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.2)
    args = parser.parse_args()
    port = int(os.environ["SHOAL_PORT_http"])
    n_actors = int(os.environ["SHOAL_ACTOR_NUM"])
    server = socket.create_server(("0.0.0.0", port))
    print(f"learner listening on {os.environ['SHOAL_HOST_IP']}:{port}, "
          f"waiting for {n_actors} actors", flush=True)
    actors = accept_actors(server, n_actors)
    weights = np.zeros((N_CELLS + 1, N_ACTIONS))
    history = []
    for iteration in range(1, args.iterations + 1):
        message = json.dumps({"weights": weights.tolist(), "episodes": args.episodes_per_actor})
        for _, _, writer in actors:
            writer.write(message + "\n")
            writer.flush()
        episodes = []
        for _, reader, _ in actors:
            episodes += json.loads(reader.readline())["episodes"]
        returns = [e["return"] for e in episodes]
        baseline = float(np.mean(returns))
        grad = sum(reinforce_gradient(weights, e, baseline) for e in episodes) / len(episodes)
        weights += args.lr * grad
        history.append(baseline)
        print(f"iteration {iteration:3d}: {len(episodes)} episodes, mean return {baseline:+.3f}",
              flush=True)
        if len(history) >= 3 and min(history[-3:]) >= GOAL_RETURN:
            break
    for conn, _, writer in actors:
        writer.write(json.dumps({"stop": True}) + "\n")
        writer.flush()
        conn.close()
    first, last = history[0], float(np.mean(history[-3:]))
    print(f"mean return went from {first:+.3f} to {last:+.3f} in {len(history)} iterations")
    print("learned" if last >= GOAL_RETURN else "did not learn")
    time.sleep(0.1)
    return 0 if last >= GOAL_RETURN else 1


if __name__ == "__main__":
    sys.exit(main())
