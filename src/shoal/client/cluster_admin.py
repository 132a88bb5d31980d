"""Joining nodes and the cluster's CA, for :class:`shoal.client.ShoalClient` (a mixin: the SDK
is one class; docs/cluster.md)."""

from __future__ import annotations

from typing import Any


class ClusterAdminCalls:
    """``/api/v1/join-tokens``, ``/api/v1/nodes/{name}`` removal and ``/api/v1/admin/ca``."""

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:  # ShoalClient's
        raise NotImplementedError

    # ---- joining (a server on the network) ----

    def create_join_token(self, ttl_s: float | None, uses: int | None) -> dict[str, Any]:
        """A join token (admins): ``token`` is shown only in this answer."""
        body = {"ttlSeconds": ttl_s, "uses": uses}
        result: dict[str, Any] = self._call("POST", "/api/v1/join-tokens", json=body)
        return result

    def join_tokens(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/join-tokens")
        return result

    def revoke_join_token(self, token_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("DELETE", f"/api/v1/join-tokens/{token_id}")
        return result

    def remove_node(self, name: str, force: bool = False) -> dict[str, Any]:
        """Revoke the node's certificate and remove it (admins); 409 if tasks run there."""
        params = {"force": "true"} if force else {}
        result: dict[str, Any] = self._call("DELETE", f"/api/v1/nodes/{name}", params=params)
        return result

    # ---- cloud node pools (docs/cloud.md) ----

    def pools(self) -> list[dict[str, Any]]:
        """The pools with their machines, node-hours and cost."""
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/pools")
        return result

    def scale_pool(self, name: str, target: int | None) -> dict[str, Any]:
        """Set a pool's size (admins); ``None``: back to the cloud file's min and max."""
        body = {"target": target}
        result: dict[str, Any] = self._call("PUT", f"/api/v1/pools/{name}/target", json=body)
        return result

    # ---- the cluster's CA (a server on the network; docs/cluster.md, "Rotating the CA") ----

    def ca_status(self) -> dict[str, Any]:
        """The CA, the staged one during a rotation, and each node's (admins)."""
        result: dict[str, Any] = self._call("GET", "/api/v1/admin/ca")
        return result

    def rotate_ca(self) -> dict[str, Any]:
        """Stage a new CA: both are trusted, nodes renew onto it (admins)."""
        result: dict[str, Any] = self._call("POST", "/api/v1/admin/ca/rotate")
        return result

    def finish_ca_rotation(self, force: bool = False) -> dict[str, Any]:
        """Drop the old CA (admins); 409 while nodes are on it, unless ``force``."""
        params = {"force": "true"} if force else {}
        result: dict[str, Any] = self._call("POST", "/api/v1/admin/ca/finish", params=params)
        return result
