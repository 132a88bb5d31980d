"""The task-port block of ``shoal run``: 1,000 ports per simulated node from a base port.

Given ``--port-base``, the block is checked (inside 1024..65535); without it, the first block from
30000 up (``shoal up`` starts at 20000) that holds no bound socket and stays out of the kernel's
ephemeral port range, where outgoing connections take their local ports.
"""

from __future__ import annotations

from pathlib import Path

from shoal.agent.ports import bound_ports
from shoal.protocol import PORTS_PER_SIMULATED_NODE

RUN_FIRST_BASE = 30000  # above ``shoal up``'s default block (20000, 1,000 ports per node)
HIGHEST_PORT = 65535
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def block_size(nodes: int) -> int:
    return nodes * PORTS_PER_SIMULATED_NODE


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (inclusive); Linux's default if it cannot be read."""
    try:
        low, high = (int(v) for v in _EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def port_base_problem(base: int, nodes: int) -> str | None:
    """Why ``--port-base base`` cannot serve ``nodes`` nodes, or None if it can."""
    last = base + block_size(nodes) - 1
    if base < 1024:
        return f"--port-base {base}: ports below 1024 are privileged; use 1024 or more"
    if last > HIGHEST_PORT:
        most = HIGHEST_PORT + 1 - block_size(nodes)
        return f"--port-base {base}: {nodes} node(s) need ports up to {last}; use at most {most}"
    return None


def free_port_base(nodes: int, start: int = RUN_FIRST_BASE) -> int | None:
    """The first block from ``start`` up (then down from it) with no bound port, outside the
    ephemeral range if any such block exists; None if every block holds a bound port."""
    size = block_size(nodes)
    step = PORTS_PER_SIMULATED_NODE
    candidates = [*range(start, HIGHEST_PORT + 2 - size, step), *range(start - step, 1023, -step)]
    candidates.append(1024)  # the lowest block: the only one for the most nodes
    taken = bound_ports()
    free = [b for b in candidates if not any(b <= port < b + size for port in taken)]
    low, high = ephemeral_range()
    clear = [b for b in free if b + size - 1 < low or b > high]
    best = clear or free
    return best[0] if best else None
