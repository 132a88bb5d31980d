"""Free GPUs per node in the simulator, kept so that the metrics a timeline sample needs cost
nothing per node or per waiting job: busy GPUs, and the fragmented ones (free GPUs on nodes too
small for the smallest GPU task of any waiting job) from a histogram of free GPUs per node and a
count of waiting jobs by their smallest GPU task."""

from __future__ import annotations

from collections.abc import Iterable

from shoal.core.snapshot import NodeState
from shoal.sim.workload import SimJob


class FreeGpus:
    def __init__(self, nodes: Iterable[NodeState]) -> None:
        self.by_node = {node.name: node.capacity.gpu for node in nodes}
        self.busy = 0
        self._nodes_with: dict[int, int] = {}  # free GPUs -> how many nodes have that many
        for free in self.by_node.values():
            self._nodes_with[free] = self._nodes_with.get(free, 0) + 1
        self._waiting_smallest: dict[int, int] = {}  # smallest GPU task -> waiting jobs

    def add_node(self, node: NodeState) -> None:
        """A node joined (a pool's machine finished booting): all its GPUs are free."""
        free = self.by_node[node.name] = node.capacity.gpu
        self._nodes_with[free] = self._nodes_with.get(free, 0) + 1

    def remove_node(self, node: str) -> None:
        """A node left (terminated); it holds no task, so nothing busy goes with it."""
        self._nodes_with[self.by_node.pop(node)] -= 1

    def take(self, node: str, gpus: int) -> None:
        self._move(node, -gpus)
        self.busy += gpus

    def give(self, node: str, gpus: int) -> None:
        self._move(node, gpus)
        self.busy -= gpus

    def _move(self, node: str, delta: int) -> None:
        if not delta:
            return
        before = self.by_node[node]
        after = self.by_node[node] = before + delta
        self._nodes_with[before] -= 1
        self._nodes_with[after] = self._nodes_with.get(after, 0) + 1

    def job_waits(self, job: SimJob) -> None:
        smallest = _smallest_gpu_task(job)
        if smallest:
            self._waiting_smallest[smallest] = self._waiting_smallest.get(smallest, 0) + 1

    def job_leaves(self, job: SimJob) -> None:
        smallest = _smallest_gpu_task(job)
        if smallest:
            self._waiting_smallest[smallest] -= 1

    def fragmented(self) -> int:
        """Free GPUs on nodes too small for the smallest GPU task of any waiting job."""
        smallest = min((size for size, jobs in self._waiting_smallest.items() if jobs), default=0)
        return sum(free * nodes for free, nodes in self._nodes_with.items() if 0 < free < smallest)


def _smallest_gpu_task(job: SimJob) -> int:
    return min((r.per_instance.gpu for r in job.roles if r.per_instance.gpu), default=0)
