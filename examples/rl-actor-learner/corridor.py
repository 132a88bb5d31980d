"""A toy environment: walk a corridor of N cells from the left end to the goal on the right.

Actions: 0 = left, 1 = right. Reward -0.01 per step and +1 at the goal; an episode ends at the
goal or after ``max_steps``. A random policy rarely gets there; a good one walks right.
"""

from __future__ import annotations

import numpy as np

N_CELLS = 12
N_ACTIONS = 2


def features(state: int) -> np.ndarray:
    one_hot = np.zeros(N_CELLS + 1)
    one_hot[state] = 1.0
    one_hot[-1] = 1.0  # bias
    return one_hot


def policy_probs(weights: np.ndarray, state: int) -> np.ndarray:
    logits = features(state) @ weights
    logits -= logits.max()
    exp = np.exp(logits)
    return exp / exp.sum()


def run_episode(weights: np.ndarray, rng: np.random.Generator, max_steps: int = 60) -> dict:
    state, steps = 0, []
    total = 0.0
    for _ in range(max_steps):
        action = int(rng.choice(N_ACTIONS, p=policy_probs(weights, state)))
        state_next = min(state + 1, N_CELLS - 1) if action == 1 else max(state - 1, 0)
        reward = 1.0 if state_next == N_CELLS - 1 else -0.01
        steps.append((state, action, reward))
        total += reward
        state = state_next
        if state == N_CELLS - 1:
            break
    return {"steps": steps, "return": total}


def reinforce_gradient(weights: np.ndarray, episode: dict, baseline: float) -> np.ndarray:
    grad = np.zeros_like(weights)
    rewards = [r for _, _, r in episode["steps"]]
    to_go = np.cumsum(rewards[::-1])[::-1]
    for (state, action, _), g in zip(episode["steps"], to_go, strict=True):
        probs = policy_probs(weights, state)
        one_hot = np.zeros(N_ACTIONS)
        one_hot[action] = 1.0
        grad += np.outer(features(state), one_hot - probs) * (g - baseline)
    return grad
