"""``shoal server init`` and ``shoal server start``: a server on the network, HTTPS only, with
its own CA. ``shoal server`` with no subcommand is still the local-mode server ``shoal up``
starts (plain HTTP on loopback)."""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from shoal.cli.common import SCHEDULER_OPTION, RuntimeChoice, SchedulerPlace, fail
from shoal.cli.kubernetes_commands import (
    KubernetesArgs,
    helper_image_option,
    k8s_kubeconfig,
    kubeconfig_option,
    namespace_option,
    pod_server_url_option,
    start_barrier_option,
)
from shoal.cli.kubernetes_commands import options as k8s_options
from shoal.cli.render import console, print_problems
from shoal.paths import DEFAULT_PORT, default_home

# shoal.server is imported inside the commands only (tests/cli/test_cli_imports.py).
if TYPE_CHECKING:
    from shoal.server.ca import PkiFiles
    from shoal.server.context import ServerContext
    from shoal.server.settings import ServerSettings

server_app = typer.Typer(
    help="A shoal server on the network: `init` (CA, certificates, admin token), `start`.",
    invoke_without_command=True,
)
WILDCARDS = ("0.0.0.0", "::")
HOME_OPTION = typer.Option(None, "--home", help="State directory (default $SHOAL_HOME).")
STORE_OPTION = typer.Option(
    None,
    "--store",
    envvar="SHOAL_STORE",
    help="postgresql://USER:PASSWORD@HOST:PORT/DB: the cluster's state in PostgreSQL "
    "(docs/postgresql.md). Default: what `init --store` recorded, else SQLite in --home.",
)


def _limit(name: str, help_text: str) -> typing.Any:
    """A limit's option; unset: the server's default (docs/limits.md)."""
    return typer.Option(None, name, min=0, help=f"{help_text} 0: no limit.")


def proxy_port_for(port: int, asked: int | None) -> int:
    """The task proxy's port: as asked, else the API's port + 1 (any free one beside port 0)."""
    if asked is not None:
        return asked
    return port + 1 if 0 < port < 65535 else 0


def _with_limits(settings: ServerSettings, **limits: int | None) -> ServerSettings:
    """``settings`` with the limits given on the command line (the others: defaults)."""
    given = {name: value for name, value in limits.items() if value is not None}
    return dataclasses.replace(settings, **given)  # type: ignore[arg-type]


@server_app.callback()
def local_server(
    ctx: typer.Context,
    home: Path = typer.Option(None, "--home", hidden=True),
    host: str = typer.Option("127.0.0.1", "--host", hidden=True),
    port: int = typer.Option(DEFAULT_PORT, "--port", hidden=True),
    kill_grace: float = typer.Option(10.0, "--kill-grace", min=0, hidden=True),
    node_timeout: float = typer.Option(30.0, "--node-timeout", min=0.5, hidden=True),
    scheduler: SchedulerPlace = typer.Option(SchedulerPlace.PROCESS, "--scheduler", hidden=True),
    kubernetes: bool = typer.Option(False, "--kubernetes", hidden=True),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", hidden=True),
    namespace: str = typer.Option("default", "--namespace", hidden=True),
    proxy_port: int | None = typer.Option(None, "--proxy-port", min=0, max=65535, hidden=True),
    proxy_port_fallback: bool = typer.Option(False, "--proxy-port-fallback", hidden=True),
) -> None:
    """With no subcommand: the local-mode server in the foreground (what `shoal up` starts)."""
    if ctx.invoked_subcommand is not None:
        return
    from shoal.cli.cluster_commands import server

    server(
        home, host, port, kill_grace, node_timeout, scheduler, kubernetes, kubeconfig, namespace,
        proxy_port=proxy_port, proxy_port_fallback=proxy_port_fallback,
    )  # fmt: skip


@server_app.command("init")
def init(
    home: Path = HOME_OPTION,
    hosts: list[str] = typer.Option(
        [], "--host", help="A name or address agents and users reach the server at (repeat)."
    ),
    store: str | None = STORE_OPTION,
    files_dir: Path | None = typer.Option(
        None,
        "--files-dir",
        help="Where task logs and uploaded code and data live (default: --home). Servers "
        "sharing one --store need one directory they all mount (docs/postgresql.md).",
    ),
) -> None:
    """Create the cluster's CA, the server certificate (for each --host, plus localhost and
    127.0.0.1), the admin user and its token. Run again to add hosts: the CA is kept.
    With --store, the cluster's state lives in that PostgreSQL database (docs/postgresql.md)."""
    from shoal.server.ca import (
        PkiFiles,
        create_ca,
        issue_server_certificate,
        server_hosts,
        wanted_hosts,
    )

    home = (home or default_home()).expanduser().resolve()
    files = PkiFiles.of(home)
    _refuse_half_ca(files)
    url = _checked_store(store, reach=True) if store is not None else None
    if url is not None:
        _refuse_another_store(home, url)
    if files_dir is not None:
        _record_files_dir(home, files_dir)
    if files.ca_cert.exists():
        console.print(f"CA kept: {files.ca_cert} (never replaced; `init` only adds hosts)")
    else:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        create_ca(files)
        console.print(f"CA created: {files.ca_cert} (key {files.ca_key}, mode 0600)")
    old = server_hosts(files) if files.server_cert.exists() else None
    wanted = wanted_hosts(hosts or [h for h in old or [] if h not in wanted_hosts([])])
    if old is not None and sorted(old) == sorted(wanted) and files.server_key.exists():
        console.print(f"server certificate kept: {files.server_cert} for {', '.join(wanted)}")
    else:
        issue_server_certificate(files, wanted)
        verb = "issued" if old is None else f"issued again (was for {', '.join(old)})"
        console.print(f"server certificate {verb}: {files.server_cert} for {', '.join(wanted)}")
    _admin_token(home, url)
    _next_steps(home, wanted[0], files.ca_hash())


def _refuse_half_ca(files: PkiFiles) -> None:
    if files.ca_cert.exists() != files.ca_key.exists():
        present, missing = (
            (files.ca_cert, files.ca_key)
            if files.ca_cert.exists()
            else (files.ca_key, files.ca_cert)
        )
        raise fail(
            f"{present} exists but {missing} does not: restore it from a backup, or move "
            f"{files.directory} away to start a new cluster (`init` never replaces a CA silently)"
        )


def _admin_token(home: Path, store: str | None) -> None:
    """The store migrated (and, given one, recorded as the home's), the admin user made."""
    from shoal.server.app import ADMIN_TOKEN_FILE
    from shoal.server.settings import ServerSettings
    from shoal.store.db import record_store, safe_url

    _prepared(ServerSettings(home=home, tls=True, database_url=store)).db.dispose()
    if store is not None:
        record_store(home, store)
        console.print(f"store: {safe_url(store)} (in {home / 'store.url'}, mode 0600)")
    console.print(f"admin user 'admin', token in {home / ADMIN_TOKEN_FILE} (mode 0600)")


def _record_files_dir(home: Path, files_dir: Path) -> None:
    """Record where logs and blobs go; one recorded already is changed only by moving them."""
    from shoal.store.db import FILES_FILE, record_files_dir, recorded_files_dir

    wanted = files_dir.expanduser().resolve()
    current = recorded_files_dir(home)
    if current is not None and current != wanted:
        raise fail(
            f"{home} keeps its logs and blobs in {current}: to use {wanted}, stop the server, "
            f"move logs/, blobs/ and code/ there, and write the new path in {home / FILES_FILE}"
        )
    if current is None and any((home / part).exists() for part in ("logs", "blobs", "code")):
        raise fail(
            f"{home} holds logs or blobs already: move logs/, blobs/ and code/ to {wanted} "
            f"first, then run init --files-dir again"
        )
    try:
        wanted.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise fail(f"--files-dir {wanted}: {exc.strerror}") from None
    record_files_dir(home, wanted)
    console.print(f"logs and blobs: {wanted} (in {home / FILES_FILE})")


def _refuse_another_store(home: Path, url: str) -> None:
    """`init --store` on a home whose cluster lives in another store would start an empty
    cluster beside it (and a new admin token): moving is `move-store`'s job."""
    from shoal.store.db import STORE_FILE, home_store, safe_url, sqlite_url

    current = home_store(home)
    recorded = (home / STORE_FILE).exists()
    if (recorded and current != url) or (not recorded and (home / "shoal.db").exists()):
        raise fail(
            f"{home} keeps its cluster in {safe_url(current if recorded else sqlite_url(home))}: "
            f"to move it, `shoal server move-store --home {home} --to URL`"
        )


def _checked_store(store: str, reach: bool = False) -> str:
    """``--store`` as the driver's URL; with ``reach``, also connected to once (before `init`
    makes anything), so a store that cannot be opened stops the command in one line."""
    from shoal.store.db import StoreUrlError, check_reachable, store_url

    try:
        url = store_url(store)
    except StoreUrlError as exc:
        raise fail(str(exc)) from None
    problem = check_reachable(url) if reach else None
    if problem is not None:
        raise fail(problem)
    return url


def _prepared(settings: ServerSettings) -> ServerContext:
    """``prepare(settings)``, with a store that cannot be opened said in one line."""
    from shoal.server.app import prepare
    from shoal.server.settings import FencingError
    from shoal.store.db import home_store, open_problem

    try:
        return prepare(settings)
    except FencingError as exc:  # the timings cannot keep two attempts of a task apart
        raise fail(str(exc)) from None
    except Exception as exc:
        problem = open_problem(settings.database_url or home_store(settings.home), exc)
        if problem is None:
            raise
        raise fail(problem) from None


def _next_steps(home: Path, host: str, ca_hash: str) -> None:
    url = f"https://{host}:{DEFAULT_PORT}"
    console.print(f"CA public-key hash: sha256:{ca_hash}", highlight=False)
    console.print("next:", highlight=False)
    for line in (
        f"shoal server start --home {home} --host {host} --port {DEFAULT_PORT}",
        f"shoal config set-context cluster --server {url} --token-file {home}/admin.token "
        f"--ca {home}/pki/ca.crt --use",
        "shoal node token create --ttl 1h   (prints the `shoal agent join` line for a node)",
    ):
        console.print(f"  {line}", markup=False, highlight=False)


# shared by `start` and `install-service`, whose unit passes them on to `start`
PORT_OPTION = typer.Option(
    DEFAULT_PORT, "--port", min=1, max=65535, help=f"Port to listen on ({DEFAULT_PORT})."
)
KILL_GRACE_OPTION = typer.Option(10.0, "--kill-grace", min=0, help="SIGTERM→SIGKILL (s).")
NODE_TIMEOUT_OPTION = typer.Option(
    30.0, "--node-timeout", min=0.5, help="Seconds without heartbeat before NOT_READY."
)


@server_app.command("start")
def start(
    home: Path = HOME_OPTION,
    host: str = typer.Option(..., "--host", help="Address to listen on (0.0.0.0: all)."),
    port: int = PORT_OPTION,
    kill_grace: float = KILL_GRACE_OPTION,
    node_timeout: float = NODE_TIMEOUT_OPTION,
    scheduler: SchedulerPlace = SCHEDULER_OPTION,
    default_runtime: RuntimeChoice = typer.Option(
        RuntimeChoice.PROCESS,
        "--default-runtime",
        help="How jobs run when neither their file nor `job submit --runtime` says.",
    ),
    max_body: int | None = _limit("--max-body", "Bytes of a JSON/YAML body (1 MiB)."),
    max_upload: int | None = _limit("--max-upload", "Bytes of a code archive (100 MiB)."),
    max_push: int | None = _limit("--max-push", "Bytes of a data set or image push (none)."),
    rate_requests: int | None = _limit("--rate-limit-requests", "Requests/min per user (3000)."),
    rate_submissions: int | None = _limit(
        "--rate-limit-submissions", "Submissions/hour per user (1000)."
    ),
    rate_anonymous: int | None = _limit(
        "--rate-limit-anonymous", "Requests/min per address without a token (600)."
    ),
    kubernetes: bool = typer.Option(
        False,
        "--kubernetes",
        help="Also run jobs as Pods on a Kubernetes cluster's Nodes (docs/kubernetes.md).",
    ),
    kubeconfig: str | None = kubeconfig_option(),
    namespace: str = namespace_option(),
    node_selector: str = typer.Option(
        "", "--node-selector", help="With --kubernetes: only Nodes with these labels."
    ),
    default_image: str | None = typer.Option(
        None, "--default-image", help="With --kubernetes: the image of jobs that name none."
    ),
    image_pull_policy: str | None = typer.Option(
        None, "--image-pull-policy", help="With --kubernetes: Always, IfNotPresent or Never."
    ),
    network: str = typer.Option(
        "host", "--network", help="With --kubernetes: host, or pod (DNS names; cluster DNS)."
    ),
    start_barrier: bool = start_barrier_option(),
    helper_image: str | None = helper_image_option(),
    pod_server_url: str | None = pod_server_url_option(),
    proxy_port: int | None = typer.Option(
        None,
        "--proxy-port",
        min=0,
        max=65535,
        help="The task proxy's own port (docs/proxy.md): default --port + 1; 0: any free one.",
    ),
    cloud: Path | None = typer.Option(
        None,
        "--cloud",
        help="A cloud file: node pools that grow with the queue and shrink when idle "
        "(docs/cloud.md).",
    ),
    cloud_join_url: str | None = typer.Option(
        None,
        "--cloud-join-url",
        help="With --cloud: the URL new machines join (default: this server's --host and --port).",
    ),
    store: str | None = STORE_OPTION,
) -> None:
    """Serve HTTPS only, in the foreground: users with Bearer tokens, agents with the node
    certificates they got at `shoal agent join`. Limits (docs/limits.md): 0 turns one off.
    With --kubernetes, the Kubernetes agent runs beside it (docs/kubernetes.md)."""
    from shoal.local.supervisor import port_in_use
    from shoal.server.app import make_server
    from shoal.server.ca import PkiFiles, server_hosts
    from shoal.server.settings import ServerSettings

    home = (home or default_home()).expanduser().resolve()
    files = PkiFiles.of(home)
    if not files.exists():
        raise fail(
            f"no CA and server certificate in {files.directory}: run `shoal server init "
            f"--home {home} --host {host}` first"
        )
    named = server_hosts(files)
    if host not in WILDCARDS and host not in named:
        raise fail(
            f"--host {host}: the server certificate names only {', '.join(named)}, so clients "
            f"would refuse it; add it with `shoal server init --home {home} --host {host}`"
        )
    if port_in_use("127.0.0.1" if host in WILDCARDS else host, port):
        raise fail(f"--port {port}: port {port} on {host} is in use; pick another with --port")
    proxy_port = proxy_port_for(port, proxy_port)
    if proxy_port and port_in_use("127.0.0.1" if host in WILDCARDS else host, proxy_port):
        raise fail(
            f"--proxy-port {proxy_port}: port {proxy_port} on {host} is in use; pick another "
            "with --proxy-port (0: any free one)"
        )
    cloud = _checked_cloud_file(cloud, cloud_join_url)
    url = _checked_store(store) if store is not None else None
    k8s_argv = None
    if kubernetes:
        args = KubernetesArgs(
            kubeconfig=kubeconfig,
            namespace=namespace,
            node_selector=node_selector,
            default_image=default_image,
            image_pull_policy=image_pull_policy,
            network=network,
            start_barrier=start_barrier,
            helper_image=helper_image,
            pod_server_url=pod_server_url,
        )
        k8s_options(args)  # a typo in an option is said now, before anything starts
        k8s_argv = args.argv()
    elif kubeconfig is not None or namespace != "default":
        raise fail("--kubeconfig and --namespace go with --kubernetes")
    settings = ServerSettings(
        home=home,
        host=host,
        port=port,
        kill_grace_s=kill_grace,
        node_timeout_s=node_timeout,
        tls=True,
        scheduler=scheduler.value,
        default_runtime=default_runtime.value,
        kubernetes=kubernetes,
        kubeconfig=k8s_kubeconfig(kubeconfig),
        kubernetes_namespace=namespace,
        proxy_port=proxy_port,
        cloud_file=cloud,
        cloud_join_url=cloud_join_url,
        database_url=url,
    )
    settings = _with_limits(
        settings,
        max_body_bytes=max_body,
        max_upload_bytes=max_upload,
        max_push_bytes=max_push,
        rate_limit_requests_per_min=rate_requests,
        rate_limit_submissions_per_hour=rate_submissions,
        rate_limit_anonymous_per_min=rate_anonymous,
    )
    ctx = _prepared(settings)
    local = "127.0.0.1" if host in WILDCARDS else host
    url = f"https://{local}:{port}"
    (home / "server.json").write_text(json.dumps({"url": url, "pid": os.getpid()}))
    console.print(f"shoal server on {settings.url} (HTTPS; CA {files.ca_cert})", markup=False)
    child = None
    if k8s_argv is not None:
        from shoal.kubernetes.child import AgentChild

        token = home / "kubernetes.token"
        child = AgentChild(url, token, k8s_argv, home / "kubernetes-agent.log")
        child.start()
        console.print(
            f"Kubernetes agent: namespace {namespace}, log {home / 'kubernetes-agent.log'}"
        )
    try:
        make_server(ctx, log_level="warning").run()
    finally:
        if child is not None:
            child.stop()


@server_app.command("install-service")
def install_service(
    home: Path = HOME_OPTION,
    host: str = typer.Option(..., "--host", help="Address to listen on, as for `start`."),
    port: int = PORT_OPTION,
    kill_grace: float = KILL_GRACE_OPTION,
    node_timeout: float = NODE_TIMEOUT_OPTION,
    output: Path | None = typer.Option(
        None,
        "--output",
        help="Write the unit here (a file, or a directory for shoal-server.service) instead "
        "of /etc/systemd/system.",
    ),
    print_unit: bool = typer.Option(False, "--print", help="Print the unit; write nothing."),
) -> None:
    """Write a systemd unit that runs `shoal server start` with these options (this Python's
    `python -m shoal`, Restart=on-failure), and print the systemctl line that starts it."""
    from shoal.cli.service_units import install, note, server_unit

    home = (home or default_home()).expanduser().resolve()
    if not (home / "pki" / "ca.crt").exists():
        note(f"{home} has no CA yet: run `shoal server init --home {home} --host {host}` first")
    unit = server_unit(home, host, port, node_timeout, kill_grace)
    install(unit, output, print_unit, "server")


def _checked_cloud_file(path: Path | None, join_url: str | None) -> Path | None:
    """The cloud file, read now so that its problems are said before the server starts."""
    if path is None:
        if join_url is not None:
            raise fail("--cloud-join-url goes with --cloud")
        return None
    from shoal.cloud.pools import load_cloud
    from shoal.spec.errors import SpecError

    path = path.expanduser().resolve()
    try:
        config = load_cloud(path)
    except SpecError as exc:
        print_problems(str(path), exc.problems)
        raise typer.Exit(1) from None
    pools = ", ".join(f"{p.name} ({p.min_nodes}-{p.max_nodes})" for p in config.pools)
    console.print(f"cloud pools of {config.cluster}: {pools or 'none'}", markup=False)
    return path


def _register_move_store() -> None:
    from shoal.cli.store_commands import move_store

    server_app.command("move-store")(move_store)


_register_move_store()
