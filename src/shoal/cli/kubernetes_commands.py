"""``shoal kubernetes agent`` (the agent whose nodes are a Kubernetes cluster's; ``shoal up
--kubernetes`` and ``shoal server start --kubernetes`` start it for you) and the options those
share (docs/kubernetes.md)."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path

import typer

from shoal.cli.common import fail

kubernetes_app = typer.Typer(help="Kubernetes as a place shoal runs jobs (docs/kubernetes.md).")

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def kubeconfig_option() -> typing.Any:
    return typer.Option(
        None,
        "--kubeconfig",
        help="The cluster's kubeconfig (default: in-cluster config in a Pod, else $KUBECONFIG "
        "or ~/.kube/config).",
    )


def namespace_option() -> typing.Any:
    return typer.Option("default", "--namespace", help="Where shoal creates its Pods.")


def start_barrier_option() -> typing.Any:
    return typer.Option(
        False,
        "--start-barrier",
        help="With --network pod: a task starts once every peer's Pod answers "
        "(a job's SHOAL_START_BARRIER=0/1 overrides).",
    )


def helper_image_option() -> typing.Any:
    return typer.Option(
        None,
        "--helper-image",
        help="The image of shoal's helpers in a Pod: code and data fetch, start barrier "
        "(default: the task's own; needs python3).",
    )


def pod_server_url_option() -> typing.Any:
    return typer.Option(
        None,
        "--server-url-for-pods",
        help="The shoal server's URL as Pods reach it, to fetch code and data "
        "(default: the agent's own).",
    )


@dataclass(frozen=True)
class KubernetesArgs:
    """The Kubernetes options as given on a command line (checked by ``options``)."""

    kubeconfig: str | None = None
    namespace: str = "default"
    context: str | None = None
    node_selector: str = ""
    gpu_type_label: str = "nvidia.com/gpu.product"
    default_image: str | None = None
    image_pull_policy: str | None = None
    tolerate: tuple[str, ...] = ()
    no_logs: bool = False
    network: str = "host"
    instance: str = "shoal"
    start_barrier: bool = False
    helper_image: str | None = None
    pod_server_url: str | None = None

    def argv(self) -> list[str]:
        """These options as ``shoal kubernetes agent`` takes them."""
        args = ["--namespace", self.namespace, "--gpu-type-label", self.gpu_type_label]
        args += ["--network", self.network, "--instance", self.instance]
        for flag, value in (
            ("--kubeconfig", self.kubeconfig),
            ("--context", self.context),
            ("--node-selector", self.node_selector or None),
            ("--default-image", self.default_image),
            ("--image-pull-policy", self.image_pull_policy),
            ("--helper-image", self.helper_image),
            ("--server-url-for-pods", self.pod_server_url),
        ):
            if value:
                args += [flag, value]
        for key in self.tolerate:
            args += ["--tolerate-taint", key]
        if self.start_barrier:
            args.append("--start-barrier")
        return [*args, "--no-logs"] if self.no_logs else args


def k8s_kubeconfig(path: str | None) -> str | None:
    """The kubeconfig as an absolute path (a server's working directory may differ)."""
    return str(Path(path).expanduser().resolve()) if path else None


def options(args: KubernetesArgs) -> typing.Any:
    """``KubernetesOptions``, or a clear error naming the option."""
    from shoal.kubernetes.options import DEFAULT_IMAGE, KubernetesOptions

    if args.image_pull_policy is not None and args.image_pull_policy not in PULL_POLICIES:
        raise fail(
            f"--image-pull-policy {args.image_pull_policy}: must be one of "
            f"{', '.join(PULL_POLICIES)}"
        )
    if args.network not in ("host", "pod"):
        raise fail(f"--network {args.network}: must be host or pod (docs/kubernetes.md)")
    if args.pod_server_url is not None and not re.match(r"https?://[^/]+", args.pod_server_url):
        raise fail(
            f"--server-url-for-pods {args.pod_server_url}: give the shoal server's URL as Pods "
            "reach it, e.g. https://shoal.shoal.svc:8443"
        )
    if args.start_barrier and args.network != "pod":
        raise fail(
            "--start-barrier needs --network pod: in the host network, peers are reached at "
            "their nodes' addresses, and the barrier has no port of its own there"
        )
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?", args.instance):
        raise fail(f"--instance {args.instance}: must be a label value: a-z, 0-9, '.', '-'")
    if args.kubeconfig is not None and not Path(args.kubeconfig).expanduser().is_file():
        raise fail(f"--kubeconfig {args.kubeconfig}: no such file")
    return KubernetesOptions(
        kubeconfig=str(Path(args.kubeconfig).expanduser()) if args.kubeconfig else None,
        context=args.context,
        namespace=args.namespace,
        node_selector=args.node_selector,
        gpu_type_label=args.gpu_type_label,
        default_image=args.default_image or DEFAULT_IMAGE,
        image_pull_policy=args.image_pull_policy,  # type: ignore[arg-type]
        tolerated_taints=args.tolerate,
        follow_logs=not args.no_logs,
        network=args.network,  # type: ignore[arg-type]
        instance=args.instance,
        start_barrier=args.start_barrier,
        helper_image=args.helper_image,
        pod_server_url=args.pod_server_url,
    )


@kubernetes_app.command("agent")
def agent(
    server_url: str = typer.Option(..., "--server", help="The shoal server's URL."),
    token_file: Path = typer.Option(
        ..., "--token-file", help="The server's kubernetes.token (in its home)."
    ),
    kubeconfig: str | None = kubeconfig_option(),
    namespace: str = namespace_option(),
    context: str | None = typer.Option(None, "--context", help="The kubeconfig's context."),
    node_selector: str = typer.Option(
        "", "--node-selector", help="Use only Nodes with these labels (e.g. pool=gpu)."
    ),
    gpu_type_label: str = typer.Option(
        "nvidia.com/gpu.product", "--gpu-type-label", help="The Node label naming its GPU type."
    ),
    default_image: str | None = typer.Option(
        None, "--default-image", help="The image of jobs that name none."
    ),
    image_pull_policy: str | None = typer.Option(
        None, "--image-pull-policy", help="Always, IfNotPresent or Never (default: Kubernetes')."
    ),
    tolerate: list[str] = typer.Option(
        [], "--tolerate-taint", help="A taint key shoal's Pods tolerate (repeatable)."
    ),
    no_logs: bool = typer.Option(False, "--no-logs", help="Do not ship logs (kwok nodes)."),
    network: str = typer.Option(
        "host", "--network", help="host: the node's network; pod: DNS names (needs cluster DNS)."
    ),
    instance: str = typer.Option(
        "shoal", "--instance", help="Which shoal, when several share a cluster (a label value)."
    ),
    start_barrier: bool = start_barrier_option(),
    helper_image: str | None = helper_image_option(),
    pod_server_url: str | None = pod_server_url_option(),
    watch_fd: int | None = typer.Option(None, "--watch-fd", hidden=True),
) -> None:
    """Run the agent whose nodes are a Kubernetes cluster's Nodes, in the foreground."""
    from shoal.kubernetes.main import KubernetesConfigError, configure_logging, run

    args = KubernetesArgs(
        kubeconfig,
        namespace,
        context,
        node_selector,
        gpu_type_label,
        default_image,
        image_pull_policy,
        tuple(tolerate),
        no_logs,
        network,
        instance,
        start_barrier,
        helper_image,
        pod_server_url,
    )
    if not token_file.is_file():
        raise fail(f"--token-file {token_file}: no such file (the server writes it at start)")
    configure_logging()
    try:
        code = run(server_url, token_file, options(args), watch_fd)
    except KubernetesConfigError as exc:
        raise fail(str(exc)) from None
    raise typer.Exit(code)
