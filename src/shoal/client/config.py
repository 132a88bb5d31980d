"""Which server the CLI talks to, with which token, and why: contexts (like a kubeconfig).

Resolution order, first match wins:

1. ``--context NAME`` / ``$SHOAL_CONTEXT``: that context's server and token, nothing else;
2. ``$SHOAL_URL`` (with ``$SHOAL_TOKEN``, or the local cluster's token if the URL is the local
   cluster's): the URL as given;
3. the current context of the config file (``$SHOAL_CONFIG``, default
   ``~/.config/shoal/config.yaml``), ``$SHOAL_TOKEN`` replacing its token if set;
4. the local cluster ``shoal up`` recorded under ``$SHOAL_HOME`` (``server.json``; token from
   ``token`` written by ``shoal login``, else ``admin.token``), ``$SHOAL_TOKEN`` replacing it;
5. nothing: :class:`NoServerConfigured`, never a guessed URL.

A context of an https:// server names the cluster's CA file (``ca``, `--ca`): the server is
verified against it (pinned), not against the system's CAs. ``$SHOAL_CA`` does so for
``$SHOAL_URL``; the local cluster's home provides ``pki/ca.crt`` when ``shoal server start`` runs
there.

The context named ``local`` is reserved: it always means step 4, so ``--context local`` and
``shoal config use-context local`` pick the local cluster whatever else is configured.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shoal.client.sdk import Endpoint
from shoal.client.transport import ShoalError
from shoal.paths import default_config_path, default_home

LOCAL = "local"
NAME_HINT = "letters, digits, '.', '_' and '-'"
# Set by the root `--context` option of the CLI; ``$SHOAL_CONTEXT`` when None.
selected_context: str | None = None


class ConfigError(ShoalError):
    """The CLI's configuration is missing something or is malformed (not the server's "no")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(0, code, message)


class NoServerConfigured(ConfigError):
    def __init__(self) -> None:
        super().__init__(
            "NoServerConfigured",
            "no shoal server is configured: run `shoal up` for a local cluster, or "
            "`shoal config set-context NAME --server URL --token-file FILE` (and `shoal config "
            "use-context NAME`) for a remote one",
        )


@dataclass(frozen=True)
class Context:
    name: str
    server: str
    token: str | None = None
    token_file: str | None = None
    ca: str | None = None  # the cluster's CA file (https:// servers)

    def as_yaml(self) -> dict[str, str]:
        data = {"name": self.name, "server": self.server}
        if self.token is not None:
            data["token"] = self.token
        if self.token_file is not None:
            data["token-file"] = self.token_file
        if self.ca is not None:
            data["ca"] = self.ca
        return data


@dataclass
class ClientConfig:
    path: Path
    contexts: dict[str, Context] = field(default_factory=dict)
    current: str | None = None

    @classmethod
    def load(cls, path: Path | None = None) -> ClientConfig:
        path = path or default_config_path()
        if not path.exists():
            return cls(path)
        import yaml

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError("BadConfig", f"{path} cannot be read: {exc}") from None
        return cls(path, _contexts(path, data), _current(path, data))

    def get(self, name: str) -> Context:
        if name not in self.contexts:
            known = ", ".join(sorted(self.contexts)) or "none yet"
            raise ConfigError(
                "UnknownContext",
                f"no context {name!r} in {self.path} (known: {known}); add it with "
                f"`shoal config set-context {name} --server URL`",
            )
        return self.contexts[name]

    def save(self) -> None:
        """Write the whole file atomically, readable by its owner only (it may hold tokens)."""
        import tempfile

        import yaml

        data: dict[str, Any] = {
            "current-context": self.current,
            "contexts": [c.as_yaml() for c in sorted(self.contexts.values(), key=_by_name)],
        }
        text = "# shoal CLI contexts; edit with `shoal config ...`\n" + yaml.safe_dump(
            data, sort_keys=False
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".config-", dir=self.path.parent)  # mode 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, self.path)
        os.chmod(self.path, 0o600)


def _by_name(context: Context) -> str:
    return context.name


def _contexts(path: Path, data: Any) -> dict[str, Context]:
    if not isinstance(data, dict) or not isinstance(data.get("contexts") or [], list):
        raise ConfigError("BadConfig", f"{path}: expected a mapping with a `contexts:` list")
    found: dict[str, Context] = {}
    for item in data.get("contexts") or []:
        if not isinstance(item, dict) or not item.get("name") or not item.get("server"):
            raise ConfigError("BadConfig", f"{path}: every context needs a name and a server")
        token, token_file, ca = item.get("token"), item.get("token-file"), item.get("ca")
        found[str(item["name"])] = Context(
            str(item["name"]),
            str(item["server"]),
            None if token is None else str(token),
            None if token_file is None else str(token_file),
            None if ca is None else str(ca),
        )
    return found


def _current(path: Path, data: dict[str, Any]) -> str | None:
    value = data.get("current-context")
    return None if value in (None, "") else str(value)


def valid_name(name: str) -> bool:
    return bool(name) and all(ch.isalnum() or ch in "._-" for ch in name)


# ---- resolution ----


def resolve(
    context: str | None = None, home: Path | None = None, config_path: Path | None = None
) -> Endpoint:
    """The server and token the CLI uses now, with where each came from (see the module doc)."""
    home = home or default_home()
    chosen = context or selected_context or os.environ.get("SHOAL_CONTEXT") or None
    if chosen is not None:
        how = "--context" if (context or selected_context) else "$SHOAL_CONTEXT"
        if chosen == LOCAL:
            return _require_local(home, how)
        return from_context(ClientConfig.load(config_path).get(chosen), config_path)
    env_url, env_token = os.environ.get("SHOAL_URL"), os.environ.get("SHOAL_TOKEN")
    if env_url:
        local = local_endpoint(home)
        env_ca = os.environ.get("SHOAL_CA") or None
        if env_token:
            return Endpoint(env_url, env_token, "$SHOAL_TOKEN", None, "$SHOAL_URL", env_ca)
        if local is not None and local.url.rstrip("/") == env_url.rstrip("/"):
            return replace(local, url=env_url, url_source="$SHOAL_URL", ca=env_ca or local.ca)
        return Endpoint(env_url, None, None, None, "$SHOAL_URL", env_ca)
    config = ClientConfig.load(config_path)
    found: Endpoint | None
    if config.current == LOCAL:
        found = _require_local(home, f"the current context (in {config.path})")
    elif config.current is not None:
        found = from_context(config.get(config.current), config.path)
    else:
        found = local_endpoint(home)
    if found is None:
        raise NoServerConfigured()
    if env_token:
        found = replace(found, token=env_token, token_source="$SHOAL_TOKEN")
    return found


def from_context(context: Context, config_path: Path | None = None) -> Endpoint:
    path = config_path or default_config_path()
    token, source = context.token, f"context {context.name} (file {path})"
    if context.token_file is not None:
        token_path = Path(context.token_file).expanduser()
        try:
            token = token_path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                "BadConfig",
                f"context {context.name}: token file {token_path} cannot be read "
                f"({exc.strerror}); fix it with `shoal config set-context {context.name} "
                "--token-file FILE`",
            ) from None
        source = f"context {context.name} (token file {token_path})"
    ca = None if context.ca is None else str(Path(context.ca).expanduser())
    return Endpoint(
        context.server,
        token,
        source if token else None,
        context.name,
        f"context {context.name}",
        ca,
    )


def local_endpoint(home: Path | None = None) -> Endpoint | None:
    """The cluster ``shoal up`` recorded under ``home``, if any (running or not)."""
    home = home or default_home()
    url = _recorded_url(home)
    if url is None:
        return None
    ca_file = home / "pki" / "ca.crt"  # a server on the network started in this home
    ca = str(ca_file) if url.startswith("https://") and ca_file.exists() else None
    where = f"the local cluster under {home}"
    for name, what in (("token", "`shoal login`"), ("admin.token", "`shoal up`")):
        path = home / name
        if path.exists():
            token = path.read_text(encoding="utf-8").strip()
            source = f"the token file {what} wrote ({path})"
            return Endpoint(url, token, source, LOCAL, where, ca)
    return Endpoint(url, None, None, LOCAL, where, ca)


def _recorded_url(home: Path) -> str | None:
    for name in ("server.json", "run.json"):
        try:
            url = json.loads((home / name).read_text())["url"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return str(url)
    return None


def _require_local(home: Path, how: str) -> Endpoint:
    found = local_endpoint(home)
    if found is None:
        raise ConfigError(
            "NoLocalCluster",
            f"context local (chosen by {how}): no local cluster under {home}; start one with "
            "`shoal up`",
        )
    return found
