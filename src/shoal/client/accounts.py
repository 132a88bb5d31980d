"""Users, tokens, who am I and the exec audit log for :class:`shoal.client.ShoalClient` (a
mixin: the SDK is one class)."""

from __future__ import annotations

from typing import Any


class AccountCalls:
    """``/api/v1/users``, ``/api/v1/tokens``, ``/api/v1/me`` and ``/api/v1/exec-sessions``."""

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:  # ShoalClient's
        raise NotImplementedError

    def create_user(
        self, name: str, admin: bool, groups: list[str], password: str | None
    ) -> dict[str, Any]:
        body = {"name": name, "admin": admin, "groups": groups, "password": password}
        result: dict[str, Any] = self._call("POST", "/api/v1/users", json=body)
        return result

    def users(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/users")
        return result

    def patch_user(
        self, name: str, changes: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "PATCH",
            f"/api/v1/users/{name}",
            json=changes,
            params={"dryRun": "true"} if dry_run else None,
        )
        return result

    def delete_user(self, name: str, stop_jobs: bool = False) -> dict[str, Any]:
        """Delete a user; ``stop_jobs`` stops their active jobs first (else they make a 409)."""
        result: dict[str, Any] = self._call(
            "DELETE",
            f"/api/v1/users/{name}",
            params={"stopJobs": "true"} if stop_jobs else None,
        )
        return result

    def me(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/api/v1/me")
        return result

    def create_token(
        self, label: str, expires_in_s: float | None, application: bool
    ) -> dict[str, Any]:
        body = {"label": label, "expires_in_s": expires_in_s, "application": application}
        result: dict[str, Any] = self._call("POST", "/api/v1/tokens", json=body)
        return result

    def tokens(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/tokens")
        return result

    def revoke_token(self, token_id: int) -> None:
        self._call("DELETE", f"/api/v1/tokens/{token_id}")

    def exec_sessions(
        self, limit: int = 100, job: str | None = None, user: str | None = None
    ) -> list[dict[str, Any]]:
        """The audit log of exec sessions, newest first (yours; an admin's: everyone's)."""
        params: dict[str, Any] = {"limit": limit, "job": job, "user": user}
        query = {k: v for k, v in params.items() if v is not None}
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/exec-sessions", params=query)
        return result

    def audit_log(
        self,
        limit: int = 100,
        since: float | None = None,
        actor: str | None = None,
        action: str | None = None,
        outcome: str | None = None,
    ) -> list[dict[str, Any]]:
        """The audit log (admins), newest first; ``action`` may be a prefix ending in '.'."""
        params: dict[str, Any] = {
            "limit": limit,
            "since": since,
            "actor": actor,
            "action": action,
            "outcome": outcome,
        }
        query = {k: v for k, v in params.items() if v is not None}
        result: list[dict[str, Any]] = self._call("GET", "/api/v1/audit", params=query)
        return result
