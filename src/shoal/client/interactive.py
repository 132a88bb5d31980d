"""Working in running tasks, for :class:`shoal.client.ShoalClient` (a mixin: the SDK is one
class): tasks held for debugging (docs/debug-jobs.md), SSH keys and access (docs/ssh.md), and
who a job's ports are shared with (docs/proxy.md)."""

from __future__ import annotations

from typing import Any


class InteractiveCalls:
    """``/api/v1/jobs/{job}/release``, ``/ssh``, ``/shares`` and ``/api/v1/ssh-keys``."""

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:  # ShoalClient's
        raise NotImplementedError

    # ---- tasks held for debugging (docs/debug-jobs.md) ----

    def release(self, ref: str, task: str | None = None) -> dict[str, Any]:
        """End the hold of the job's held tasks (``task``: ROLE/INDEX, only that one)."""
        body = {"task": task} if task is not None else {}
        result: dict[str, Any] = self._call("POST", f"/api/v1/jobs/{ref}/release", json=body)
        return result

    # ---- SSH (docs/ssh.md) ----

    def add_ssh_key(self, public_key: str, name: str | None = None) -> dict[str, Any]:
        """Register an SSH public key (one line of a ``.pub`` file)."""
        body = {"public_key": public_key, "name": name}
        result: dict[str, Any] = self._call("POST", "/api/v1/ssh-keys", json=body)
        return result

    def ssh_keys(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/ssh-keys")
        return result

    def remove_ssh_key(self, name: str) -> None:
        self._call("DELETE", f"/api/v1/ssh-keys/{name}")

    def job_ssh(self, ref: str) -> dict[str, Any]:
        """How to reach the job's tasks by ssh: login, host key, each task's port."""
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}/ssh")
        return result

    # ---- sharing a job's ports (docs/proxy.md) ----

    def job_shares(self, ref: str) -> dict[str, Any]:
        """Who else may reach the job's tasks' ports: ``{id, users, groups}``."""
        result: dict[str, Any] = self._call("GET", f"/api/v1/jobs/{ref}/shares")
        return result

    def set_job_shares(self, ref: str, users: list[str], groups: list[str]) -> dict[str, Any]:
        """Replace who else may reach the job's tasks' ports."""
        body = {"users": users, "groups": groups}
        result: dict[str, Any] = self._call("PUT", f"/api/v1/jobs/{ref}/shares", json=body)
        return result
