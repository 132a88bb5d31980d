"""Slurm 22.05 (slurm-wlm + munge), single node, config "C" of ENVIRONMENT.md, in its own netns.

"Running" here: the batch script's first command, ``date +%s.%N``, has written its timestamp.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from peer_proc import Netns, log, run, spawn, stamp_command, stop_group, wait_for_file

CONF = Path("/etc/slurm/slurm.conf")
BACKUP = Path("/etc/slurm/slurm.conf.before-shoal-bench")
BASE = Path("/var/lib/shoal-bench/slurm")  # state, spool, logs and pid files of this benchmark
MUNGE_KEY = Path("/etc/munge/munge.key")
ACTIVE_STATES = "PD,R,CG,CF,S"


def render_slurm_conf(slots: int, base: Path = BASE) -> str:
    """ENVIRONMENT.md config C: one node with ``slots`` fake CPUs, no scheduling delays."""
    memory = max(4000, 100 * slots)  # DefMemPerCPU=100, so memory never limits before CPUs do
    lines = [
        "# written by bench/peers (shoal); the previous file, if any, is in "
        f"{BACKUP.name} until the run ends",
        "ClusterName=shoalbench",
        "SlurmctldHost=localhost",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        f"StateSaveLocation={base}/state",
        f"SlurmdSpoolDir={base}/spool",
        f"SlurmctldPidFile={base}/run/slurmctld.pid",
        f"SlurmdPidFile={base}/run/slurmd.pid",
        f"SlurmctldLogFile={base}/log/slurmctld.log",
        f"SlurmdLogFile={base}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={slots} RealMemory={memory} State=UNKNOWN",
        "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        "DefMemPerCPU=100",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "SlurmdParameters=config_overrides",
    ]
    return "\n".join(lines) + "\n"


def parse_job_id(sbatch_output: str) -> int:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    return int(sbatch_output.strip().split(";", 1)[0])


def install() -> None:
    """apt-get install slurm-wlm munge, unless they are there already."""
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "squeue", "munged")):
        log("slurm: slurm-wlm and munge are installed")
        return
    log("slurm: apt-get install -y slurm-wlm munge")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update"], timeout=600, env=env)
    run(["apt-get", "install", "-y", "slurm-wlm", "munge"], timeout=900, env=env)


def version() -> str:
    return run(["slurmctld", "-V"]).stdout.strip()  # needs no slurm.conf


class Slurm:
    """slurmctld + slurmd (+ munged unless one already answers) inside ``netns``."""

    def __init__(self, netns: Netns, slots: int, scratch: Path) -> None:
        self.netns = netns
        self.slots = slots
        self.scratch = scratch
        self.procs: list = []
        self.backed_up = False

    def cmd(self, *args: str) -> list[str]:
        return [*self.netns.prefix(), *args]

    def configure(self) -> None:
        text = render_slurm_conf(self.slots)
        if CONF.exists() and CONF.read_text() != text and not BACKUP.exists():
            shutil.copy2(CONF, BACKUP)
            self.backed_up = True
        CONF.parent.mkdir(parents=True, exist_ok=True)
        CONF.write_text(text)
        if BASE.exists():
            shutil.rmtree(BASE)  # no job state survives from an earlier run
        slurm = pwd.getpwnam("slurm")
        for sub in ("state", "spool", "log", "run"):
            (BASE / sub).mkdir(parents=True)
        for sub in ("state", "log", "run"):
            os.chown(BASE / sub, slurm.pw_uid, slurm.pw_gid)
        if not MUNGE_KEY.exists():
            run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"])
        munge = pwd.getpwnam("munge")
        os.chown(MUNGE_KEY, munge.pw_uid, munge.pw_gid)
        MUNGE_KEY.chmod(0o400)
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        os.chown("/run/munge", munge.pw_uid, munge.pw_gid)

    def restore(self) -> None:
        if self.backed_up and BACKUP.exists():
            shutil.move(BACKUP, CONF)

    def start(self) -> None:
        logs = self.scratch / "slurm-logs"
        if run(["munge", "-n"], check=False).returncode != 0:
            munged = ["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--foreground"]
            self.procs.append(spawn(self.cmd(*munged), logs / "munged.log"))
            self._wait(lambda: run(["munge", "-n"], check=False).returncode == 0, "munged")
        self.procs.append(spawn(self.cmd("slurmctld", "-D"), logs / "slurmctld.out"))
        self.procs.append(spawn(self.cmd("slurmd", "-D", "-N", "localhost"), logs / "slurmd.out"))
        self._wait(self._idle, "the Slurm node to become idle")

    def _idle(self) -> bool:
        out = run(self.cmd("sinfo", "-h", "-o", "%T"), check=False, timeout=10).stdout
        return out.strip() == "idle"

    def _wait(self, ready, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a Slurm daemon exited while waiting for {what}; see logs")
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for {what}")

    def stop(self) -> None:
        if self.procs:  # cancel whatever a failed measurement left queued in our controller
            with contextlib.suppress(subprocess.TimeoutExpired):
                run(self.cmd("scancel", "--user", "root"), check=False, timeout=30)
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
            stop_group(proc)
        self.procs.clear()

    def sbatch(self, command: str) -> int:
        args = ["sbatch", "--parsable", "-o", "/dev/null", f"--chdir={self.scratch}"]
        out = run(self.cmd(*args, "--wrap", command), timeout=30).stdout
        return parse_job_id(out)

    def sbatch_array(self, command: str, indices: str) -> int:
        args = ["sbatch", "--parsable", "-o", "/dev/null", f"--chdir={self.scratch}"]
        args.append(f"--array={indices}")
        out = run(self.cmd(*args, "--wrap", command), timeout=30).stdout
        return parse_job_id(out)

    def any_active(self) -> bool:
        """Whether any job or array task is still queued or running (an array's pending tasks
        show as one ``ID_[5-999%20]`` line)."""
        out = run(self.cmd("squeue", "-h", "-t", ACTIVE_STATES, "-o", "%i"), timeout=30).stdout
        return bool(out.strip())

    def array_done(self, array_id: int) -> int:
        """How many tasks of array ``array_id`` completed (listed for MinJobAge)."""
        out = run(self.cmd("squeue", "-h", "-r", "-t", "CD", "-o", "%i"), timeout=30).stdout
        return count_array_tasks(out, array_id)

    def job_ids(self, states: str) -> set[int]:
        out = run(self.cmd("squeue", "-h", "-t", states, "-o", "%i"), timeout=30).stdout
        return {int(x) for x in out.split()}

    def wait_done(self, job_id: int, timeout_s: float, poll_s: float = 0.01) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if job_id not in self.job_ids(ACTIVE_STATES):
                return
            time.sleep(poll_s)
        raise TimeoutError(f"Slurm job {job_id} did not finish within {timeout_s:.0f}s")

    def measure_latency(self, count: int, tag: str = "lat") -> list[float]:
        """Sequential jobs on an idle cluster: submit → the batch script's first command ran."""
        latencies = []
        for i in range(count):
            stamp = self.scratch / f"slurm-{tag}-{i}"
            submitted = time.time()
            job_id = self.sbatch(stamp_command(stamp))
            latencies.append(float(wait_for_file(stamp, 120.0)) - submitted)
            self.wait_done(job_id, 120.0)
        return latencies

    def measure_drain(self, count: int, timeout_s: float) -> tuple[float, float, int]:
        """Submit ``count`` ``true`` jobs back to back; time until none is left in the queue."""
        start = time.time()
        ids = {self.sbatch("true") for _ in range(count)}
        submitted = time.time() - start
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.job_ids(ACTIVE_STATES):
                break
            time.sleep(0.05)
        elapsed = time.time() - start
        succeeded = len(ids & self.job_ids("CD"))  # completed jobs stay listed for MinJobAge
        return elapsed, submitted, succeeded

    def measure_drain_array(
        self, count: int, slots: int, timeout_s: float
    ) -> tuple[float, float, int]:
        """``sbatch --array=0-{count-1}%{slots} --wrap true``: one submission; time until no
        task is left in the queue, and how many completed."""
        start = time.time()
        array_id = self.sbatch_array("true", f"0-{count - 1}%{slots}")
        submitted = time.time() - start
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.any_active():
            time.sleep(0.05)
        elapsed = time.time() - start
        return elapsed, submitted, self.array_done(array_id)


def count_array_tasks(squeue_ids: str, array_id: int) -> int:
    """Lines ``ID_INDEX`` of array ``array_id`` in ``squeue -r -o %i`` output (one task each;
    a folded ``ID_[5-9%2]`` line of pending tasks is not a task)."""
    prefix = f"{array_id}_"
    return sum(
        1
        for line in squeue_ids.split()
        if line.startswith(prefix) and line[len(prefix) :].isdigit()
    )


def measure(args, scratch: Path) -> dict:
    """Start Slurm in its namespace, measure, stop it; the namespace is deleted even on failure."""
    netns = Netns("shoal-bench-slurm", "198.18.1.1/32")
    slurm = Slurm(netns, args.slots, scratch)
    try:
        slurm.configure()
        netns.create()
        slurm.start()
        log(f"slurm: up ({version()}); warm-up job, then {args.latency_jobs} latency jobs")
        slurm.measure_latency(1, tag="warmup")
        latencies = slurm.measure_latency(args.latency_jobs)
        log(f"slurm: draining {args.drain_jobs} jobs")
        drain_s, submit_s, succeeded = slurm.measure_drain(args.drain_jobs, args.drain_timeout)
        log(f"slurm: draining {args.drain_jobs} jobs as one array, at most {args.slots} at once")
        array = slurm.measure_drain_array(args.drain_jobs, args.slots, args.drain_timeout)
    finally:
        slurm.stop()
        netns.delete()
        slurm.restore()
    return {
        "version": version(),
        "latencies": latencies,
        "drain_seconds": drain_s,
        "submit_seconds": submit_s,
        "drain_succeeded": succeeded,
        "array_drain_seconds": array[0],
        "array_submit_seconds": array[1],
        "array_drain_succeeded": array[2],
        "array_how": f"sbatch --array=0-{args.drain_jobs - 1}%{args.slots} --wrap true",
        "running_means": "the batch script's first command (`date +%s.%N`) wrote its timestamp",
    }
