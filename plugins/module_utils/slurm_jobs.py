"""Reading Slurm job state from squeue and sacct output.

Kept apart from the slurm_job module so that the parsing, which decides whether a job is submitted again,
waited on or reported failed, is unit-tested without a cluster.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# States in which a job will not change any more (sacct names; squeue shows only live jobs).
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
ACTIVE_STATES = frozenset(
    {
        "CONFIGURING",
        "COMPLETING",
        "PENDING",
        "REQUEUED",
        "RESIZING",
        "RUNNING",
        "SIGNALING",
        "STAGE_OUT",
        "SUSPENDED",
        "STOPPED",
    }
)

# squeue --format for one job per line; "|" cannot appear in the fields we ask for.
SQUEUE_FORMAT = "%i|%j|%T|%N|%M|%r|%Z"
SACCT_FIELDS = "JobID,JobName,State,ExitCode,NodeList,NNodes,ElapsedRaw,WorkDir"


@dataclass
class JobInfo:
    """What the module reports about one job."""

    job_id: str
    name: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    nodes: list[str] = field(default_factory=list)
    node_count: int = 0
    elapsed_s: int | None = None
    reason: str = ""
    work_dir: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.update(active=self.active, terminal=self.terminal)
        return data


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand Slurm's compressed host lists: ``ts-compute[1-3,7],head`` → four names plus ``head``.

    Slurm prints node lists compressed; results and the playbook's table want the real host names.
    """
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", hostlist or ""):
        match = re.fullmatch(r"(.*?)\[([^\]]+)\](.*)", part)
        if not match:
            if part and part != "None assigned":
                hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return hosts


def _elapsed_seconds(text: str) -> int | None:
    """Parse squeue's TIME ([days-]hours:minutes:seconds, or minutes:seconds)."""
    if not text or text in ("INVALID", "UNLIMITED"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_squeue(output: str) -> list[JobInfo]:
    """Parse ``squeue --noheader --format SQUEUE_FORMAT`` output."""
    jobs = []
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7:
            continue
        job_id, name, state, nodelist, elapsed, reason, work_dir = fields
        nodes = expand_hostlist(nodelist)
        jobs.append(
            JobInfo(
                job_id=job_id,
                name=name,
                state=state,
                nodes=nodes,
                node_count=len(nodes),
                elapsed_s=_elapsed_seconds(elapsed),
                reason=reason if reason != "None" else "",
                work_dir=work_dir,
            )
        )
    return jobs


def parse_sacct(output: str) -> JobInfo | None:
    """Parse ``sacct --parsable2 --noheader -X --format SACCT_FIELDS`` for one job (its allocation line)."""
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 8 or "." in fields[0]:
            continue
        job_id, name, state, exit_code, nodelist, nnodes, elapsed, work_dir = fields[:8]
        code, _, sig = exit_code.partition(":")
        nodes = expand_hostlist(nodelist)
        return JobInfo(
            job_id=job_id,
            name=name,
            # "CANCELLED by 0" → "CANCELLED"
            state=state.split()[0] if state else "UNKNOWN",
            exit_code=int(code) if code.isdigit() else None,
            signal=int(sig) if sig.isdigit() else None,
            nodes=nodes,
            node_count=int(nnodes) if nnodes.isdigit() else len(nodes),
            elapsed_s=int(elapsed) if elapsed.isdigit() else None,
            work_dir=work_dir,
        )
    return None


def parse_sbatch(output: str) -> str:
    """Return the job id from ``sbatch --parsable`` (``<id>`` or ``<id>;<cluster>``)."""
    job_id = output.strip().split(";")[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch did not return a job id: {output.strip()!r}")
    return job_id
