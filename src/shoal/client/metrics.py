"""``/api/v1/overview``, ``/api/v1/metrics`` and the tasks on a node for
:class:`shoal.client.ShoalClient` (a mixin: the SDK is one class; docs/metrics.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


class MetricsCalls:
    """The cluster at a glance and node metrics over time."""

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:  # ShoalClient's
        raise NotImplementedError

    def overview(self) -> dict[str, Any]:
        """Capacity, reservations and use now; nodes and jobs by state; each VC's sharing."""
        result: dict[str, Any] = self._call("GET", "/api/v1/overview")
        return result

    def cluster_metrics(
        self, since: float | None = None, step: float | None = None
    ) -> dict[str, Any]:
        """The cluster's series (``since`` < 0: seconds before the server's now)."""
        result: dict[str, Any] = self._call(
            "GET", "/api/v1/metrics/cluster", params=_window(since, step)
        )
        return result

    def node_metrics(
        self, name: str, since: float | None = None, step: float | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "GET", f"/api/v1/nodes/{quote(name, safe='')}/metrics", params=_window(since, step)
        )
        return result

    def node_tasks(self, name: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call(
            "GET", f"/api/v1/nodes/{quote(name, safe='')}/tasks"
        )
        return result


def _window(since: float | None, step: float | None) -> dict[str, float]:
    params: dict[str, float] = {}
    if since is not None:
        params["since"] = since
    if step is not None:
        params["step"] = step
    return params
