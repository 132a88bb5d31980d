"""Pure helpers: summaries, percentiles, ratios, the rich table, the Markdown fragment, and the
docs/benchmarks.md region it goes into. No process, file or network access here."""

from __future__ import annotations

import statistics

from rich.table import Table

SYSTEMS = ("shoal", "slurm", "ray")  # the order they are shown in
RUN_ORDER = ("slurm", "shoal", "ray")  # Ray last: by far the longest
LABELS = {"shoal": "shoal local mode", "slurm": "Slurm", "ray": "Ray Jobs"}
BEGIN = "<!-- peers:begin -->"
END = "<!-- peers:end -->"
SECTION = "## Against peers (bench/peers/)"
ANCHOR = "## Where the time goes"


def parse_only(value: str) -> list[str]:
    """``--only slurm,ray,shoal`` → the known systems, in run order; unknown names are errors."""
    wanted = [x.strip().lower() for x in value.split(",") if x.strip()]
    unknown = sorted(set(wanted) - set(RUN_ORDER))
    if unknown or not wanted:
        raise ValueError(f"--only takes a comma list of {', '.join(RUN_ORDER)}; got {value!r}")
    return [s for s in RUN_ORDER if s in wanted]


EXTRA = ("tuning", "drain_statuses", "drain_stuck", "first_failure")  # passed through if set


def percentile(values: list[float], q: float) -> float:
    """The value at rank round(q·(n−1)) of the sorted values (as bench/launch.py computes it)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(raw: dict, drain_jobs: int) -> dict:
    """Raw seconds from one system's run → the reported numbers (milliseconds for latency)."""
    lat = raw["latencies"]
    drain_s = raw["drain_seconds"]
    return {
        "version": raw.get("version", ""),
        "running_means": raw.get("running_means", ""),
        "latency_jobs": len(lat),
        "p50_ms": round(statistics.median(lat) * 1000, 1),
        "p99_ms": round(percentile(lat, 0.99) * 1000, 1),
        "min_ms": round(min(lat) * 1000, 1),
        "max_ms": round(max(lat) * 1000, 1),
        "drain_jobs": drain_jobs,
        "drain_seconds": round(drain_s, 2),
        "jobs_per_second": round(raw["drain_succeeded"] / drain_s, 1) if drain_s > 0 else None,
        "submit_seconds": round(raw["submit_seconds"], 2),
        "drain_succeeded": raw["drain_succeeded"],
        "loadavg_before": raw.get("loadavg_before"),
        "cpu_busy_before": raw.get("cpu_busy_before"),
        "latencies_ms": [round(x * 1000, 2) for x in lat],
        **{k: raw[k] for k in EXTRA if raw.get(k) is not None},
        **_array_summary(raw),
    }


def _array_summary(raw: dict) -> dict:
    """The drain as one array (``sbatch --array`` / ``--array``), when the system has arrays."""
    if raw.get("array_drain_seconds") is None:
        return {}
    seconds = raw["array_drain_seconds"]
    ok = raw["array_drain_succeeded"]
    return {
        "array_drain_seconds": round(seconds, 2),
        "array_submit_seconds": round(raw["array_submit_seconds"], 2),
        "array_drain_succeeded": ok,
        "array_jobs_per_second": round(ok / seconds, 1) if seconds > 0 else None,
        "array_how": raw.get("array_how", ""),
    }


def ratios(systems: dict[str, dict]) -> dict[str, dict[str, float]]:
    """For each peer: its number ÷ shoal's (above 1 means shoal is faster)."""
    shoal = systems.get("shoal")
    if not shoal or "error" in shoal:
        return {}
    out = {}
    for name, peer in systems.items():
        if name == "shoal" or "error" in peer:
            continue
        out[name] = {
            key: round(peer[key] / shoal[key], 2)
            for key in ("p50_ms", "p99_ms", "drain_seconds", "array_drain_seconds")
            if shoal.get(key) and peer.get(key)
        }
    return out


def speedup_text(ratio: float | None) -> str:
    """1.0 → "1.0× (same)"; 23.4 → "23× faster"; 0.5 → "2.0× slower"."""
    if ratio is None:
        return "—"
    if abs(ratio - 1.0) < 0.05:
        return "1.0× (same)"
    factor = ratio if ratio > 1 else 1 / ratio
    shown = f"{factor:.0f}" if factor >= 10 else f"{factor:.1f}"
    return f"{shown}× {'faster' if ratio > 1 else 'slower'}"


def drain_text(ratio: float | None, peer: dict) -> str:
    """A peer that did not finish every drain job (timeout) took at least this long."""
    text = speedup_text(ratio)
    unfinished = peer["drain_succeeded"] < peer["drain_jobs"]
    return f"≥ {text}" if unfinished and ratio and ratio > 1 else text


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def _array_cells(s: dict) -> list[str]:
    """The array drain and its jobs/s (a dash for a system without arrays)."""
    if s.get("array_drain_seconds") is None:
        return ["—", "—"]
    drain = f"{s['array_drain_seconds']:,.1f} s"
    if s["array_drain_succeeded"] != s["drain_jobs"]:
        drain += f" ({s['array_drain_succeeded']} ok)"
    return [drain, f"{s['array_jobs_per_second']:.1f}"]


def rows(systems: dict[str, dict]) -> list[list[str]]:
    """One row per system: label, version, p50, p99, drain s, jobs/s, array drain s, jobs/s,
    shoal vs it ×4."""
    rel = ratios(systems)
    out = []
    for name in SYSTEMS:
        if name not in systems:
            continue
        s = systems[name]
        if "error" in s:
            out.append([LABELS[name], s.get("version", ""), f"failed: {s['error']}"] + [""] * 9)
            continue
        r = rel.get(name, {})
        drain = f"{s['drain_seconds']:,.1f} s"
        if s["drain_succeeded"] != s["drain_jobs"]:
            drain += f" ({s['drain_succeeded']} ok)"
        out.append(
            [
                LABELS[name],
                s["version"],
                _ms(s["p50_ms"]),
                _ms(s["p99_ms"]),
                drain,
                f"{s['jobs_per_second']:.1f}",
                *_array_cells(s),
                "—" if name == "shoal" else speedup_text(r.get("p50_ms")),
                "—" if name == "shoal" else speedup_text(r.get("p99_ms")),
                "—" if name == "shoal" else drain_text(r.get("drain_seconds"), s),
                "—"
                if name == "shoal" or "array_drain_seconds" not in r
                else speedup_text(r["array_drain_seconds"]),
            ]
        )
    return out


def headers(latency_jobs: int, drain_jobs: int, slots: int) -> list[str]:
    return [
        "system",
        "version",
        f"submit → running p50 ({latency_jobs} jobs)",
        "p99",
        f"drain {drain_jobs:,} jobs, {slots} slots, one by one",
        "jobs/s",
        f"drain them as one array, %{slots}",
        "jobs/s",
        "shoal vs it: p50",
        "shoal vs it: p99",
        "shoal vs it: drain",
        "shoal vs it: array drain",
    ]


def rich_table(data: dict) -> Table:
    p = data["parameters"]
    table = Table(title="shoal vs Slurm vs Ray Jobs, one run on this machine")
    for i, head in enumerate(headers(p["latency_jobs"], p["drain_jobs"], p["slots"])):
        table.add_column(head, justify="left" if i < 2 else "right")
    for row in rows(data["systems"]):
        table.add_row(*row)
    return table


def machine_line(machine: dict) -> str:
    peers = [machine[k] for k in ("slurm", "ray") if machine.get(k)]
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, "
        f"{machine['os']}, kernel {machine['kernel']}, Python {machine['python']}"
        + "".join(f", {p}" for p in peers)
    )


def markdown(data: dict) -> str:
    """The fragment that goes between the peers markers of docs/benchmarks.md."""
    p = data["parameters"]
    systems = data["systems"]
    head = headers(p["latency_jobs"], p["drain_jobs"], p["slots"])
    lines = [
        f"Measured {data['generated_at']} by `{data['command']}`; raw numbers, every latency "
        "sample and the load average before each system in `bench/results/peers.json`.",
        "",
        f"**Machine.** {machine_line(data['machine'])}.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---|" + "---:|" * (len(head) - 2),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(systems)]
    lines += [
        "",
        '**What "running" means** (submit = the client call starts; the clocks are the '
        "same machine's wall clock):",
        "",
    ]
    for name in SYSTEMS:
        if name in systems and systems[name].get("running_means"):
            lines.append(f"- {LABELS[name]}: {systems[name]['running_means']}.")
    lines += ["", *NOTES, probe_note(data.get("stamp_probe_ms")), load_note(systems)]
    lines += ["", submit_note(systems, p["drain_jobs"]), *WHY, *outcome_notes(systems)]
    return "\n".join(lines)


WHY = [
    "",
    "- Slurm's latency is its scheduling pass, about once a second with "
    "`sched_min_interval=0` (ENVIRONMENT.md); its drain is that pass times the free slots.",
    "- Ray Jobs starts a JobSupervisor actor, a new Ray worker process, for every job before "
    "the entrypoint runs, and every submission goes through the dashboard's HTTP API; on two "
    "shared cores that CPU cost dominates both its latency and its drain.",
]


def submit_note(systems: dict[str, dict], drain_jobs: int) -> str:
    """The drain clock includes submitting; say how much of it that was."""
    parts = [
        f"{LABELS[n]} {systems[n]['submit_seconds']:,.1f} s"
        for n in SYSTEMS
        if n in systems and "submit_seconds" in systems[n]
    ]
    return (
        f"**Where the drain time goes.** Of each drain, the {drain_jobs:,} sequential submit "
        "calls alone took: " + ("; ".join(parts) or "not recorded") + "."
    )


def outcome_notes(systems: dict[str, dict]) -> list[str]:
    """Tuning beyond the defaults, and drains in which not every job succeeded."""
    notes = []
    for name in SYSTEMS:
        s = systems.get(name, {})
        if s.get("tuning"):
            notes.append(f"- {LABELS[name]} tuning: {s['tuning']}.")
        if "error" not in s and s and s["drain_succeeded"] < s["drain_jobs"]:
            states = ", ".join(f"{k} {v}" for k, v in s.get("drain_statuses", {}).items() if v)
            line = f"- {LABELS[name]} drain: {s['drain_succeeded']} of {s['drain_jobs']} succeeded"
            line += f" ({states})" if states else ""
            if s.get("drain_stuck"):
                line += f"; {len(s['drain_stuck'])} hung in RUNNING and were skipped"
            if s.get("first_failure"):
                line += f"; first failure: “{s['first_failure'][:200]}”"
            notes.append(line + ".")
    return notes


def load_note(systems: dict[str, dict]) -> str:
    """The machine is shared: say how busy it was when each system started."""
    parts = [
        f"{LABELS[n]} {systems[n]['cpu_busy_before']:.0%} busy, load average "
        f"{systems[n]['loadavg_before']:.2f}"
        for n in SYSTEMS
        if n in systems and systems[n].get("cpu_busy_before") is not None
    ]
    return (
        "- The machine is shared with other work. Before each system the run waits (up to "
        "60 s) for the CPUs to be under 25 % busy, and records how busy they were when it "
        "started: " + ("; ".join(parts) or "not recorded") + "."
    )


NOTES = [
    "**How it is run.** One system at a time (never two at once), each started fresh and "
    "stopped before the next: Slurm, then shoal, then Ray. Each gets one untimed warm-up job.",
    "",
    "- Latency: sequential jobs on an idle cluster; each job is waited on until it has finished "
    "before the next is submitted. p99 is the value at rank round(0.99·(n−1)); with 50 samples "
    "that is the slowest one.",
    "- Drain: N trivial jobs (`true`), one client call each, submitted back to back; the clock "
    "runs from the first submission until the system reports none left queued or running "
    "(jobs/s counts the jobs that succeeded). "
    "Polling every 50 ms: shoal job counts by state, Slurm `squeue` of active jobs, Ray "
    "`get_job_status` of the oldest job not yet seen finished.",
    "- Array drain: the same N trivial jobs as one array with at most `slots` elements at once, "
    "in one client call (`sbatch --array=0-999%20 --wrap true`, `shoal job submit --array "
    "0-999%20`); the clock runs from that call until nothing is left queued or running (Slurm "
    "`squeue` of active jobs; shoal job counts, the array's parent included). Ray Jobs has no "
    "arrays.",
    "- Equal slots: Slurm `CPUs=N` (ENVIRONMENT.md config C: `DefMemPerCPU=100`, "
    "`batch_sched_delay=0,sched_min_interval=0`); Ray head `--num-cpus N` with "
    "`entrypoint_num_cpus=1`; shoal one simulated node with N cores and 1-cpu tasks.",
]


def probe_note(stamp_probe_ms: float | None) -> str:
    gap = f"{stamp_probe_ms} ms" if stamp_probe_ms is not None else "not measured"
    return (
        "- The peers' timestamp is written by `date`, their first command, so it lands a little "
        "after their shell was exec'd; shoal's is taken right after the exec. That gap, "
        f"measured here for `sh -c 'date …'` (median of 20): {gap}. It counts against the "
        "peers and is small next to their numbers."
    )


def replace_region(doc: str, fragment: str) -> str:
    """Put ``fragment`` between the markers; add the section before ANCHOR if they are absent."""
    fragment = fragment.strip("\n")
    if BEGIN in doc or END in doc:
        start, end = doc.find(BEGIN), doc.find(END)
        if start < 0 or end < start:
            raise ValueError("docs/benchmarks.md has broken peers markers")
        return doc[: start + len(BEGIN)] + "\n" + fragment + "\n" + doc[end:]
    block = f"{SECTION}\n\n{BEGIN}\n{fragment}\n{END}\n\n"
    at = doc.find("\n" + ANCHOR)
    if at < 0:
        return doc.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"
    return doc[: at + 1] + block + doc[at + 1 :]
