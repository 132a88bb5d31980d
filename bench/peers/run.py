"""shoal local mode vs Slurm vs Ray Jobs, measured side by side in one run on this machine.

    .venv/bin/python bench/peers/run.py [--latency-jobs 50] [--drain-jobs 1000] [--slots 20]
                                        [--only slurm,ray,shoal] [--no-save] [--setup-only]

Setup (idempotent, needs root and the package registries): apt-get install slurm-wlm munge, and
a venv with ray[default] in bench/peers/.venv-ray. Then each system in turn, alone: Slurm and the
Ray head each in their own network namespace (198.18.0.0/15 addresses, no route out), shoal on
loopback. Writes bench/results/peers.json and the peers region of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import peer_ray
import peer_report
import peer_shoal
import peer_slurm
from peer_proc import become_subreaper, loadavg, log, reap_orphans, stamp_command, wait_quiet
from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "peers.json"
DOCS = ROOT / "docs" / "benchmarks.md"
MEASURE = {"slurm": peer_slurm.measure, "ray": peer_ray.measure, "shoal": peer_shoal.measure}
NAMESPACES = ("shoal-bench-slurm", "shoal-bench-ray")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--drain-jobs", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=20, help="slots (cores) for every system")
    parser.add_argument("--only", default="slurm,ray,shoal", help="comma list of systems")
    parser.add_argument("--drain-timeout", type=float, default=3600.0, help="seconds per system")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--no-save", action="store_true", help="print only (for trial runs)")
    parser.add_argument("--setup-only", action="store_true", help="install, then stop")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the docs region from --json, no run"
    )
    args = parser.parse_args(argv)
    args.systems = peer_report.parse_only(args.only)
    if args.latency_jobs < 1 or args.drain_jobs < 1 or args.slots < 1:
        parser.error("--latency-jobs, --drain-jobs and --slots must be positive")
    return args


def setup(systems: list[str]) -> None:
    if os.geteuid() != 0 and ("slurm" in systems or "ray" in systems):
        raise SystemExit("Slurm and the namespaces need root")
    if "slurm" in systems:
        peer_slurm.install()
    if "ray" in systems:
        peer_ray.install()


def machine(systems: list[str]) -> dict:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    os_name = platform.system()
    release = Path("/etc/os-release")
    if release.exists():
        for line in release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kib / 1024**2, 1),
        "kernel": platform.release(),
        "os": os_name,
        "python": platform.python_version(),
        "summary": peer_shoal.machine_summary(),  # bench/launch.py's machine()
        "shoal": peer_shoal.version(),
    }
    if "slurm" in systems:
        info["slurm"] = peer_slurm.version()
    if "ray" in systems:
        info["ray"] = peer_ray.version()
    return info


def stamp_probe(scratch: Path, count: int = 20) -> float:
    """Median gap (ms) between Popen returning for ``sh -c STAMP`` and the stamp's own time."""
    gaps = []
    for i in range(count):
        stamp = scratch / f"probe-{i}"
        proc = subprocess.Popen(["/bin/sh", "-c", stamp_command(stamp)])
        spawned = time.time()
        proc.wait(timeout=30)
        gaps.append(float(stamp.read_text()) - spawned)
    return round(statistics.median(gaps) * 1000, 2)


def measure_one(name: str, args: argparse.Namespace, scratch: Path) -> dict:
    """One system, alone; a failure is recorded and the other systems still run."""
    busy = wait_quiet()
    before = loadavg()
    log(f"{name}: start (CPU busy {busy:.0%} over the last 2 s, load average {before:.2f})")
    try:
        raw = MEASURE[name](args, scratch)
    except (Exception, KeyboardInterrupt) as exc:  # report it, keep the others' numbers
        traceback.print_exc()
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        reap_orphans()
    raw["loadavg_before"] = before
    raw["cpu_busy_before"] = busy
    summary = peer_report.summarize(raw, args.drain_jobs)
    log(f"{name}: p50 {summary['p50_ms']} ms, drain {summary['drain_seconds']} s")
    return summary


def check_clean() -> list[str]:
    """Namespaces of this benchmark that still exist (there should be none)."""
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False, timeout=30
    ).stdout
    return [ns for ns in NAMESPACES if ns in listed.split()]


def save(data: dict, args: argparse.Namespace, docs_only: bool = False) -> None:
    if not docs_only:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
        log(f"wrote {args.json}")
    failed = [n for n, s in data["systems"].items() if "error" in s]
    if failed:
        log(f"not updating {args.docs}: {', '.join(failed)} failed")
        return
    text = args.docs.read_text()
    args.docs.write_text(peer_report.replace_region(text, peer_report.markdown(data)))
    log(f"updated the peers region of {args.docs}")


def on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # so every finally: block stops what it started


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    if args.render_only:
        save(json.loads(args.json.read_text()), args, docs_only=True)
        return 0
    become_subreaper()
    setup(args.systems)
    if args.setup_only:
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="shoal-bench-peers-"))
    scratch.chmod(0o755)  # Slurm's batch scripts run with it as their directory
    try:
        data = {
            "generated_at": time.strftime("%Y-%m-%d %H:%M %Z"),
            "command": shlex.join([".venv/bin/python", "bench/peers/run.py", *sys.argv[1:]]),
            "parameters": {
                "latency_jobs": args.latency_jobs,
                "drain_jobs": args.drain_jobs,
                "slots": args.slots,
            },
            "machine": machine(args.systems),
            "stamp_probe_ms": stamp_probe(scratch),
            "systems": {},
        }
        for name in args.systems:
            data["systems"][name] = measure_one(name, args, scratch)
            if not args.no_save:  # keep what is measured so far, should a later system hang
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(data, indent=2) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        reap_orphans()
    data["ratios"] = peer_report.ratios(data["systems"])
    console = Console(width=200)
    console.print(peer_report.rich_table(data))
    console.print(f"machine: {peer_report.machine_line(data['machine'])}")
    if not args.no_save:
        save(data, args)
    left = check_clean()
    if left:
        log(f"namespaces left behind: {left}")
    return 1 if left or any("error" in s for s in data["systems"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
