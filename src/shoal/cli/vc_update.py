"""``shoal vc update``: change only the settings given (a PATCH), show the before/after diff."""

from __future__ import annotations

from typing import Any

import typer

from shoal.cli.changes_view import plain, print_changes
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, fail, print_json
from shoal.spec import units

RESOURCE_HINT = "write e.g. gpu=4,gpu.A100=2,cpu=16,memory=64Gi"
LABELS = {
    "description": "description",
    "guarantee_cpu": "guarantee cpu",
    "guarantee_memory_mib": "guarantee memory",
    "guarantee_gpu": "guarantee gpu",
    "guarantee_gpu_by_type": "guarantee gpu by type",
    "borrow_cpu": "borrow limit cpu",
    "borrow_memory_mib": "borrow limit memory",
    "borrow_gpu": "borrow limit gpu",
    "user_gpu_cap": "user gpu cap",
    "preempt_within": "preempt within",
    "strict_fifo": "strict fifo",
    "aging": "aging",
    "members": "members",
    "idle_timeout_s": "idle timeout",
}
BORROW_FIELDS = ("borrow_cpu", "borrow_memory_mib", "borrow_gpu")


def parse_resources(text: str | None, option: str) -> dict[str, float] | None:
    """``gpu=4,cpu=16,memory=64Gi`` → {"gpu": 4, "cpu": 16, "memory_mib": 65536}."""
    if text is None:
        return None
    parsed: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        try:
            if not sep:
                raise ValueError(f"{item!r} is not NAME=VALUE")
            if key == "gpu":
                parsed["gpu"] = int(value)
            elif key == "cpu":
                parsed["cpu"] = units.cpu_millis(float(value)) / 1000
            elif key.startswith("gpu."):
                parsed[key] = int(value)
            elif key == "memory":
                parsed["memory_mib"] = units.memory_mib(
                    value if not value.isdigit() else int(value)
                )
            else:
                raise ValueError(f"unknown resource {key!r} (use gpu, gpu.TYPE, cpu, memory)")
        except ValueError as exc:
            raise typer.BadParameter(f"{exc}; {RESOURCE_HINT}", param_hint=option) from None
        if parsed.get(key if key != "memory" else "memory_mib", 0) < 0:
            raise typer.BadParameter(f"{key} must be >= 0", param_hint=option)
    return parsed


def describe_amounts(
    amounts: dict[str, float | None], by_type: dict[str, int] | None = None
) -> str:
    """``{"gpu": 2, "cpu": 4, "memoryMiB": 2048}`` → ``2/4/2Gi`` (gpu/cpu/memory); ``-`` for a
    resource not limited; GPUs per type follow the GPU count: ``2 A100=2/-/-``."""
    gpu, cpu, memory = amounts.get("gpu"), amounts.get("cpu"), amounts.get("memoryMiB")
    types = ",".join(f"{t}={n}" for t, n in sorted((by_type or {}).items()))
    gpus = "-" if gpu is None else f"{gpu:g}" + (f" {types}" if types else "")
    cores = "-" if cpu is None else f"{cpu:g}"
    return f"{gpus}/{cores}/{'-' if memory is None else format_mib(memory)}"


def format_mib(mib: float) -> str:
    """Memory in at most ~6 characters: 512Mi, 2Gi, 23.5Gi, 1.2Ti."""
    for unit, size in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib >= size:
            return f"{mib / size:.3g}{unit}"
    return f"{mib:g}Mi"


AGING_HINT = "write GPU-hour thresholds, e.g. 1,10 (or las:1,10)"


def parse_aging(
    text: str | None, max_preemptions: int | None = None, option: str = "--aging"
) -> dict[str, Any] | None:
    """``1,10`` or ``las:1,10`` → {"policy": "las", "thresholds_gpu_hours": [1.0, 10.0],
    "max_preemptions": ...}; the server checks the values (increasing, positive, at most 9)
    and names what is wrong."""
    if text is None:
        return None
    policy, sep, rest = text.partition(":")
    if not sep:
        policy, rest = "las", text
    try:
        hours = [float(part) for part in rest.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: {AGING_HINT}", param_hint=option) from None
    if not hours:
        raise typer.BadParameter(f"{text!r}: {AGING_HINT}", param_hint=option)
    return {
        "policy": policy.strip(),
        "thresholds_gpu_hours": hours,
        "max_preemptions": max_preemptions,
    }


def describe_aging(aging: dict[str, Any] | None) -> str:
    """``las at 1, 10 GPU-h, <= 2 preemptions`` (or ``off``)."""
    if not aging:
        return "off"
    hours = ", ".join(f"{h:g}" for h in aging["thresholds_gpu_hours"])
    most = aging.get("max_preemptions")
    return f"{aging['policy']} at {hours} GPU-h" + (f", <= {most} preemptions" if most else "")


def format_setting(name: str, value: Any) -> str:
    """A setting's value in words: null means "not limited", "any idle", "everyone" ..."""
    if name == "aging":
        return describe_aging(value)
    if value is None:
        if name.startswith("guarantee_"):
            return "not limited"
        if name.startswith("borrow_"):
            return "any idle"
        return "none"
    if name == "members" and not value:
        return "everyone"
    if name.endswith("memory_mib"):
        return format_mib(value)
    if name == "idle_timeout_s":
        return units.format_duration(int(value))
    return plain(name, value)


def parse_idle_timeout(text: str | None) -> float | None:
    """``--idle-timeout 2h`` in seconds (None: not given)."""
    if text is None:
        return None
    try:
        seconds = units.parse_duration(text, "--idle-timeout")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--idle-timeout") from None
    if seconds <= 0:
        raise typer.BadParameter("must be more than 0 (--clear-idle-timeout: never)")
    return float(seconds)


def _resource_fields(amounts: dict[str, float], prefix: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "gpu" in amounts:
        fields[f"{prefix}_gpu"] = int(amounts["gpu"])
    if "cpu" in amounts:
        fields[f"{prefix}_cpu"] = amounts["cpu"]
    if "memory_mib" in amounts:
        fields[f"{prefix}_memory_mib"] = int(amounts["memory_mib"])
    return fields


def _guarantee_patch(
    name: str, guarantee: str | None, clear: bool, current: dict[str, Any] | None
) -> dict[str, Any]:
    """``--clear-guarantee`` resets the whole guarantee; ``--guarantee`` then sets the
    resources it names, per GPU type merged into the current ones (``gpu.T=0`` drops T)."""
    patch: dict[str, Any] = {}
    if clear:
        patch = dict.fromkeys(("guarantee_cpu", "guarantee_memory_mib", "guarantee_gpu"))
        patch["guarantee_gpu_by_type"] = None
    amounts = parse_resources(guarantee, "--guarantee") or {}
    patch.update(_resource_fields(amounts, "guarantee"))
    typed = {k[4:]: int(v) for k, v in amounts.items() if k.startswith("gpu.")}
    if typed:
        merged = {} if clear or current is None else dict(current["gpuByType"])
        merged.update(typed)
        patch["guarantee_gpu_by_type"] = {t: n for t, n in merged.items() if n > 0}
    return patch


def _members_patch(
    members: str | None, clear: bool, add: list[str], remove: list[str], current: dict[str, Any]
) -> dict[str, Any]:
    if clear and (members is not None or add):
        raise typer.BadParameter(
            "--clear-members opens the VC to everyone; do not combine it with --members or "
            "--add-member",
            param_hint="--clear-members",
        )
    if clear:
        return {"members": None}
    if members is None and not add and not remove:
        return {}
    names = _names(members) if members is not None else list(current.get("members", []))
    names = [n for n in names if n != "*"]
    names += [n for n in add if n not in names]
    return {"members": [n for n in names if n not in remove]}


def _names(text: str | None) -> list[str]:
    return [m.strip() for m in (text or "").split(",") if m.strip()]


CLEAR_HELP = "Remove the setting: "


@api_errors
def update_command(
    name: str = typer.Argument(..., help="The virtual cluster's name (`shoal vc list`)."),
    guarantee: str | None = typer.Option(
        None, "--guarantee", help="Set these resources only, e.g. gpu=4 or gpu.A100=2,cpu=16."
    ),
    clear_guarantee: bool = typer.Option(
        False, "--clear-guarantee", help=CLEAR_HELP + "no guarantee (applied before --guarantee)."
    ),
    borrow_limit: str | None = typer.Option(
        None, "--borrow-limit", help="Set these borrowing limits only, e.g. gpu=2."
    ),
    clear_borrow_limit: bool = typer.Option(
        False, "--clear-borrow-limit", help=CLEAR_HELP + "may borrow any idle capacity."
    ),
    members: str | None = typer.Option(
        None, "--members", help="Replace the members (users/groups), e.g. alice,team-a."
    ),
    clear_members: bool = typer.Option(
        False, "--clear-members", help=CLEAR_HELP + "open to everyone."
    ),
    add_member: list[str] = typer.Option([], "--add-member", help="Add a user or group."),
    remove_member: list[str] = typer.Option([], "--remove-member", help="Remove one."),
    user_gpu_cap: int | None = typer.Option(
        None, "--user-gpu-cap", min=0, help="GPUs one user may hold in it."
    ),
    clear_user_cap: bool = typer.Option(
        False, "--clear-user-cap", help=CLEAR_HELP + "no per-user GPU cap."
    ),
    preempt_within: bool | None = typer.Option(
        None,
        "--preempt-within/--no-preempt-within",
        help="Higher priority classes may preempt lower ones in it.",
    ),
    strict_fifo: bool | None = typer.Option(
        None,
        "--strict-fifo/--no-strict-fifo",
        help="Strict FIFO: no later job of the VC starts while an earlier one waits.",
    ),
    aging: str | None = typer.Option(
        None,
        "--aging",
        help="Attained-service aging: GPU-hour thresholds at which jobs drop a step, e.g. 1,10.",
    ),
    aging_max_preemptions: int | None = typer.Option(
        None,
        "--aging-max-preemptions",
        min=1,
        help="With --aging: a job preempted this many times is no longer aged.",
    ),
    clear_aging: bool = typer.Option(False, "--clear-aging", help=CLEAR_HELP + "no aging."),
    description: str | None = typer.Option(
        None, "--description", help="What the virtual cluster is for."
    ),
    idle_timeout: str | None = typer.Option(
        None, "--idle-timeout", help="Stop interactive jobs idle this long, e.g. 2h."
    ),
    clear_idle_timeout: bool = typer.Option(
        False, "--clear-idle-timeout", help=CLEAR_HELP + "interactive jobs are never stopped."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change; write nothing."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Change a virtual cluster live (admins): only the settings given change."""
    if user_gpu_cap is not None and clear_user_cap:
        raise typer.BadParameter("give --user-gpu-cap or --clear-user-cap, not both")
    if aging is not None and clear_aging:
        raise typer.BadParameter("give --aging or --clear-aging, not both")
    sdk = client()
    typed = guarantee is not None and "gpu." in guarantee
    current = sdk.vc(name) if typed or add_member or remove_member else {}
    patch = _guarantee_patch(name, guarantee, clear_guarantee, current or None)
    if clear_borrow_limit:
        patch.update(dict.fromkeys(BORROW_FIELDS))
    patch.update(_resource_fields(parse_resources(borrow_limit, "--borrow-limit") or {}, "borrow"))
    patch.update(_members_patch(members, clear_members, add_member, remove_member, current))
    if user_gpu_cap is not None or clear_user_cap:
        patch["user_gpu_cap"] = user_gpu_cap
    if aging_max_preemptions is not None and aging is None:
        raise typer.BadParameter(
            "give the thresholds too, e.g. --aging 1,10", param_hint="--aging-max-preemptions"
        )
    if aging is not None or clear_aging:
        patch["aging"] = parse_aging(aging, aging_max_preemptions)
    if idle_timeout is not None or clear_idle_timeout:
        patch["idle_timeout_s"] = parse_idle_timeout(idle_timeout)
    for key, value in (
        ("preempt_within", preempt_within),
        ("strict_fifo", strict_fifo),
        ("description", description),
    ):
        if value is not None:
            patch[key] = value
    if not patch:
        raise fail(
            f"nothing to change: give at least one setting (see `shoal vc update {name} --help`)"
        )
    result = sdk.patch_vc(name, patch, dry_run=dry_run)
    if output is OutputFormat.JSON:
        print_json(result)
        return
    print_changes(f"virtual cluster {name}", result, LABELS.__getitem__, format_setting)
