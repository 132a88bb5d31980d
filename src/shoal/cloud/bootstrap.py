"""The bootstrap every cloud machine runs: cloud-init user data (a ``#!/bin/bash`` script, which
cloud-init runs as is) that installs shoal, joins the server with a one-time join token and runs
the agent: the same ``shoal agent join`` and ``shoal agent run`` as any machine (docs/cluster.md),
so there is one code path for nodes, whatever the provider.

* **Install**, by the pool's ``install``: ``preinstalled`` (the image has shoal: ``shoal_path``, or
  ``shoal`` on the PATH), ``wheelhouse`` (shoal's wheel and its dependencies fetched from the
  server's ``/api/v1/install/`` over HTTPS verifying the cluster's CA, checked against the
  manifest's sha256, then ``python3 -m venv`` and ``pip install --no-index``), or ``pinned``
  (``pip install shoal==VERSION`` from the package index).
* **Join** with the token read from a 0600 file written from a here-document: it is never on a
  command line (``ps``), and the file is removed once join has used it. The token is short-lived
  and single-use and pins the CA's hash, so a copy of the user data is worth nothing afterwards.
* **Run** the agent in the foreground when ``$SHOAL_AGENT_FOREGROUND`` is 1 or the machine has no
  systemd (the local provider's machines), else as the systemd unit ``shoal agent
  install-service`` writes. ``$SHOAL_SCHEDULED_EVENTS_URL`` is exported for the agent: where it
  reads its machine's Scheduled Events (Azure's ``Preempt`` notices).

``$SHOAL_ROOT`` (default ``/var/lib/shoal``) holds everything the script writes; the local
provider gives each machine a root of its own, since its machines share one file system.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from shoal import __version__
from shoal.pki import NODE_NAME_HINT, NODE_NAME_PATTERN, BadJoinToken, JoinToken

INSTALL_MODES = ("preinstalled", "wheelhouse", "pinned")
AZURE_SCHEDULED_EVENTS_URL = (
    "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"
)
INSTALL_ROUTE = "/api/v1/install"
MANIFEST = "MANIFEST"  # "sha256  file" per line: what the server's wheelhouse holds
DEFAULT_PORT_BASE = 20000
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9._/:-]{0,63}$")
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+!-]{0,40}$")

# Fetches the wheelhouse: every file the manifest names, each checked against its sha256.
_FETCH_PY = """\
import hashlib, pathlib, ssl, sys, time, urllib.request
server, ca, out = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
context = ssl.create_default_context(cafile=ca)
def get(name):
    for attempt in range(10):
        try:
            url = f"{server}@ROUTE@/{name}"
            with urllib.request.urlopen(url, context=context, timeout=120) as answer:
                return answer.read()
        except OSError as exc:
            print(f"fetching {name}: {exc}; again in {attempt + 1} s", flush=True)
            time.sleep(attempt + 1)
    sys.exit(f"could not fetch {name} from {server}")
for line in get("@MANIFEST@").decode().splitlines():
    digest, name = line.split()
    if "/" in name or name.startswith("."):
        sys.exit(f"the manifest names {name!r}: not a file name")
    data = get(name)
    if hashlib.sha256(data).hexdigest() != digest:
        sys.exit(f"{name}: its sha256 is not the manifest's")
    (out / name).write_bytes(data)
    print(f"fetched {name}", flush=True)
""".replace("@ROUTE@", INSTALL_ROUTE).replace("@MANIFEST@", MANIFEST)


class BootstrapError(ValueError):
    """A bootstrap that cannot be rendered: the message names the parameter and the fix."""


def render_user_data(
    *,
    server_url: str,
    join_token: str,
    node_name: str,
    ca_pem: str,
    install: str = "wheelhouse",
    labels: Mapping[str, str] | None = None,
    cpu_millis: int | None = None,
    memory_mib: int | None = None,
    gpus: int | None = None,
    port_base: int = DEFAULT_PORT_BASE,
    shoal_path: str | None = None,
    version: str | None = None,
    scheduled_events_url: str | None = None,
) -> str:
    """The user data of one machine: install shoal, join as ``node_name``, run the agent."""
    _check(server_url, join_token, node_name, ca_pem, install, labels or {})
    join = [
        '"$SHOAL" agent join "$SERVER" --token-file "$TOKEN_FILE" --name "$NODE"',
        '--home "$AGENT_HOME"',
        f"--port-base {int(port_base)}",
    ]
    if labels:
        join.append("--labels " + shlex.quote(",".join(f"{k}={v}" for k, v in labels.items())))
    if cpu_millis is not None:
        join.append(f"--cpus {cpu_millis / 1000:g}")
    if memory_mib is not None:
        join.append(f"--memory {int(memory_mib)}")
    if gpus is not None:
        join.append(f"--gpus {int(gpus)}")
    parts = [
        _head(server_url, node_name, install),
        _secrets(ca_pem, join_token),
        _install(install, shoal_path, version),
        _join_and_run(" \\\n        ".join(join), scheduled_events_url),
    ]
    return "\n".join(parts)


def _check(
    server_url: str,
    join_token: str,
    node_name: str,
    ca_pem: str,
    install: str,
    labels: Mapping[str, str],
) -> None:
    if not server_url.startswith("https://") or any(c.isspace() for c in server_url):
        raise BootstrapError(f"server_url {server_url!r}: machines join https://SERVER:PORT")
    try:
        JoinToken.parse(join_token)
    except BadJoinToken as exc:
        raise BootstrapError(f"join_token: {exc}") from None
    if not NODE_NAME_PATTERN.match(node_name):
        raise BootstrapError(f"node_name {node_name!r}: {NODE_NAME_HINT}")
    if "BEGIN CERTIFICATE" not in ca_pem or "SHOAL_CA_PEM" in ca_pem:
        raise BootstrapError("ca_pem: give the cluster CA's certificate in PEM (pki/ca.crt)")
    if install not in INSTALL_MODES:
        raise BootstrapError(f"install {install!r}: one of {', '.join(INSTALL_MODES)}")
    for key, value in labels.items():
        if not _LABEL.match(key) or not _LABEL_VALUE.match(value):
            raise BootstrapError(
                f"label {key}={value!r}: keys and values are letters, digits, ._/-"
            )


def _head(server_url: str, node_name: str, install: str) -> str:
    return f"""\
#!/bin/bash
# shoal node bootstrap (cloud-init user data; docs/cloud.md): install shoal ({install}),
# join {server_url} as {node_name} with a one-time token, run the agent.
set -euo pipefail
umask 077
SHOAL_ROOT="${{SHOAL_ROOT:-/var/lib/shoal}}"
SERVER={shlex.quote(server_url.rstrip("/"))}
NODE={shlex.quote(node_name)}
AGENT_HOME="$SHOAL_ROOT/agent"
TOKEN_FILE="$SHOAL_ROOT/join.token"
mkdir -p "$SHOAL_ROOT"
say() {{ echo "shoal bootstrap: $*"; }}
say "node $NODE joins $SERVER (root $SHOAL_ROOT)"
"""


def _secrets(ca_pem: str, join_token: str) -> str:
    # The CA is public. The token is written by cat from a here-document (its stdin): no
    # command line ever holds it; umask 077 makes the file 0600.
    return f"""\
cat > "$SHOAL_ROOT/ca.crt" <<'SHOAL_CA_PEM'
{ca_pem.strip()}
SHOAL_CA_PEM
trap 'rm -f "$TOKEN_FILE"' EXIT
cat > "$TOKEN_FILE" <<'SHOAL_JOIN_TOKEN'
{join_token}
SHOAL_JOIN_TOKEN
chmod 600 "$TOKEN_FILE"
"""


def _install(install: str, shoal_path: str | None, version: str | None) -> str:
    if install == "preinstalled":
        found = shlex.quote(shoal_path) if shoal_path else '"$(command -v shoal || true)"'
        return f"""\
SHOAL={found}
if [ -z "$SHOAL" ] || [ ! -x "$SHOAL" ]; then
    say "install preinstalled: no shoal executable on this image (${{SHOAL:-shoal not on PATH}})"
    exit 1
fi
say "using the image's shoal: $SHOAL"
"""
    venv = 'python3 -m venv "$SHOAL_ROOT/venv"\nSHOAL="$SHOAL_ROOT/venv/bin/shoal"\n'
    if install == "pinned":
        pinned = version or __version__
        if not _VERSION.match(pinned):
            raise BootstrapError(f"version {pinned!r}: a version such as 0.9.0")
        return f"""\
say "installing shoal=={pinned} from the package index"
{venv}"$SHOAL_ROOT/venv/bin/pip" install --quiet --disable-pip-version-check shoal=={pinned}
"""
    return f"""\
say "installing shoal from the server's wheelhouse"
mkdir -p "$SHOAL_ROOT/wheels"
python3 - "$SERVER" "$SHOAL_ROOT/ca.crt" "$SHOAL_ROOT/wheels" <<'SHOAL_FETCH'
{_FETCH_PY}SHOAL_FETCH
{venv}"$SHOAL_ROOT/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \\
    --find-links "$SHOAL_ROOT/wheels" shoal
"""


def _join_and_run(join_command: str, scheduled_events_url: str | None) -> str:
    events = (
        f"export SHOAL_SCHEDULED_EVENTS_URL={shlex.quote(scheduled_events_url)}\n"
        if scheduled_events_url
        else ""
    )
    return f"""\
if [ -e "$AGENT_HOME/identity/identity.json" ]; then
    say "already joined (identity in $AGENT_HOME)"
else
    {join_command}
fi
rm -f "$TOKEN_FILE"
trap - EXIT
export SHOAL_TASK_ROOT="${{SHOAL_TASK_ROOT:-$SHOAL_ROOT/tasks}}"
{events}if [ "${{SHOAL_AGENT_FOREGROUND:-}}" = 1 ] || [ ! -d /run/systemd/system ]; then
    say "running the agent"
    exec "$SHOAL" agent run --home "$AGENT_HOME"
fi
"$SHOAL" agent install-service --home "$AGENT_HOME"
mkdir -p /etc/systemd/system/shoal-agent.service.d
{{
    echo "[Service]"
    echo "Environment=SHOAL_TASK_ROOT=$SHOAL_TASK_ROOT"
    if [ -n "${{SHOAL_SCHEDULED_EVENTS_URL:-}}" ]; then
        echo "Environment=SHOAL_SCHEDULED_EVENTS_URL=$SHOAL_SCHEDULED_EVENTS_URL"
    fi
}} > /etc/systemd/system/shoal-agent.service.d/cloud.conf
systemctl daemon-reload
systemctl enable --now shoal-agent.service
say "the agent runs as shoal-agent.service"
"""
