"""Reading Slurm job state from squeue, sacct and scontrol output (text or ``--json``).

Kept apart from the slurm_job module so that the parsing, which decides whether a job is submitted again,
waited on or reported failed, is unit-tested without a cluster. Every parser returns one ``JobInfo`` per
record the tool printed; ``combine`` folds the records of a heterogeneous job (``1234+0``, ``1234+1``) or of
an array (``1234_1``, ``1234_[2-3]``) into the one answer the caller asked for.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

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
        "REVOKED",
        "TIMEOUT",
    }
)
ACTIVE_STATES = frozenset(
    {
        "CONFIGURING",
        "COMPLETING",
        "PENDING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "RUNNING",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "SUSPENDED",
        "STOPPED",
    }
)

# squeue --format for one job per line; "|" cannot appear in the fields we ask for.
SQUEUE_FORMAT = "%i|%j|%T|%N|%M|%r|%Z"
SACCT_FIELDS = "JobID,JobName,State,ExitCode,NodeList,NNodes,ElapsedRaw,WorkDir"

# 1234, 1234_7 (array task), 1234_[1-3] or 1234_[1,4-6%2] (array tasks), 1234+0 (heterogeneous component).
JOB_ID_RE = re.compile(r"(?P<base>\d+)(?:_(?P<task>\d+|\[[0-9,\-]+(?:%\d+)?\]))?(?:\+(?P<offset>\d+))?")
# Node lists that mean "no node yet".
_NO_NODES = frozenset({"", "None assigned", "(null)", "None"})


@dataclass
class JobInfo:
    """What the module reports about one job (or one component/task of it)."""

    job_id: str
    name: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    nodes: list[str] = field(default_factory=list)
    nodelist: str = ""
    node_count: int = 0
    elapsed_s: int | None = None
    reason: str = ""
    work_dir: str = ""
    source: str = ""
    components: list[dict[str, Any]] = field(default_factory=list)

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
            if part not in _NO_NODES:
                hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            lo, _dash, hi = item.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return hosts


def check_job_id(job_id: str) -> str:
    """Return a job id the tools accept, or raise ValueError saying which forms are accepted."""
    text = str(job_id).strip()
    if not JOB_ID_RE.fullmatch(text):
        raise ValueError(
            "job_id must be a Slurm job id: 1234, an array task 1234_7 or tasks 1234_[1-3], "
            f"or a heterogeneous job component 1234+0; got {job_id!r}"
        )
    return text


def _task_set(text: str | None) -> set[int] | None:
    """Array task numbers in ``7`` or ``[1,3-5%2]`` (the throttle after % is not a task)."""
    if text is None:
        return None
    tasks: set[int] = set()
    for item in text.strip("[]").split("%")[0].split(","):
        lo, _dash, hi = item.partition("-")
        if lo.isdigit():
            tasks.update(range(int(lo), int(hi or lo) + 1))
    return tasks


def base_job_id(job_id: str) -> str:
    """The id to ask the tools for: they list every task and component of ``1234`` on their own."""
    match = JOB_ID_RE.fullmatch(job_id)
    return match.group("base") if match else job_id


def select_records(job_id: str, records: list[JobInfo]) -> list[JobInfo]:
    """Records that belong to ``job_id``: all of them for a plain id, else the matching tasks/component.

    The tools are asked for the base id (so an array's pending remainder ``1234_[2-3]`` is seen too) and the
    selection happens here. A plain id is not filtered: the raw id of an array task (``1241`` for ``1234_7``)
    comes back under its array name.
    """
    wanted = JOB_ID_RE.fullmatch(job_id)
    if wanted is None or (wanted.group("task") is None and wanted.group("offset") is None):
        return records
    tasks = _task_set(wanted.group("task"))
    chosen = []
    for record in records:
        have = JOB_ID_RE.fullmatch(record.job_id)
        if have is None or have.group("base") != wanted.group("base"):
            continue
        if wanted.group("offset") is not None and have.group("offset") != wanted.group("offset"):
            continue
        record_tasks = _task_set(have.group("task"))
        if tasks is not None and not (record_tasks and tasks & record_tasks):
            continue
        chosen.append(record)
    return chosen


def _elapsed_seconds(text: str) -> int | None:
    """Parse squeue's TIME / scontrol's RunTime ([days-]hours:minutes:seconds, or minutes:seconds)."""
    if not text or text in ("INVALID", "UNLIMITED", "Unknown"):
        return None
    days, _dash, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def format_seconds(seconds: int | None) -> str:
    """``3725`` → ``1:02:05`` (the way squeue prints time, so progress lines read like squeue)."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _state_word(state: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``; ``COMPLETED+`` (sacct with a truncated width) → ``COMPLETED``."""
    return state.split()[0].rstrip("+") if state.strip() else "UNKNOWN"


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    """``3:0`` (exit code : signal) as printed by sacct and scontrol."""
    code, _colon, sig = text.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


def _record(job_id: str, name: str, state: str, nodelist: str, **extra: Any) -> JobInfo:
    nodes = expand_hostlist(nodelist)
    extra.setdefault("node_count", len(nodes))
    return JobInfo(
        job_id=job_id,
        name=name,
        state=_state_word(state),
        nodes=nodes,
        nodelist="" if nodelist in _NO_NODES else nodelist,
        **extra,
    )


# ---------------------------------------------------------------- text output


def parse_squeue(output: str) -> list[JobInfo]:
    """Parse ``squeue --noheader --format SQUEUE_FORMAT`` output."""
    jobs = []
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7:
            continue
        job_id, name, state, nodelist, elapsed, reason, work_dir = fields
        jobs.append(
            _record(
                job_id,
                name,
                state,
                nodelist,
                elapsed_s=_elapsed_seconds(elapsed),
                reason=reason if reason != "None" else "",
                work_dir=work_dir,
                source="squeue",
            )
        )
    return jobs


def parse_sacct(output: str) -> list[JobInfo]:
    """Parse ``sacct --parsable2 --noheader -X --format SACCT_FIELDS`` (allocation lines; steps skipped)."""
    jobs = []
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 8 or "." in fields[0]:
            continue
        job_id, name, state, exit_code, nodelist, nnodes, elapsed, work_dir = fields[:8]
        code, sig = _exit_pair(exit_code)
        jobs.append(
            _record(
                job_id,
                name,
                state,
                nodelist,
                exit_code=code,
                signal=sig,
                elapsed_s=int(elapsed) if elapsed.isdigit() else None,
                work_dir=work_dir,
                source="sacct",
                **({"node_count": int(nnodes)} if nnodes.isdigit() else {}),
            )
        )
    return jobs


def _scontrol_fields(line: str) -> dict[str, str]:
    """Split one ``scontrol -o show job`` line into Key=Value pairs.

    Values may hold spaces (a command with arguments) and ``=`` (``TRES=cpu=1,mem=1G``), so a new pair starts
    only at a token that looks like ``Key=``; anything else continues the previous value.
    """
    fields: dict[str, str] = {}
    key = ""
    for token in line.split(" "):
        match = re.match(r"([A-Za-z][A-Za-z0-9_:/]*)=(.*)", token)
        if match:
            key, value = match.groups()
            fields[key] = value
        elif key:
            fields[key] += f" {token}"
    return fields


def _scontrol_id(fields: dict[str, str]) -> str:
    array_id, task = fields.get("ArrayJobId", ""), fields.get("ArrayTaskId", "")
    if array_id and task:
        return f"{array_id}_{task}" if task.isdigit() else f"{array_id}_[{task}]"
    het_id, offset = fields.get("HetJobId", ""), fields.get("HetJobOffset", "")
    if het_id and offset:
        return f"{het_id}+{offset}"
    return fields.get("JobId", "")


def parse_scontrol(output: str) -> list[JobInfo]:
    """Parse ``scontrol --oneliner show job <id>``: one line per job, array task or het component.

    This is the source where there is no accounting (ParallelCluster's default cluster): slurmctld still
    knows an ended job, with its exit code, for MinJobAge seconds.
    """
    jobs = []
    for line in output.splitlines():
        fields = _scontrol_fields(line.strip())
        if "JobId" not in fields or "JobState" not in fields:
            continue
        code, sig = _exit_pair(fields.get("ExitCode", ""))
        reason = fields.get("Reason", "")
        count = fields.get("NumNodes", "").split("-")[0]
        jobs.append(
            _record(
                _scontrol_id(fields),
                fields.get("JobName", ""),
                fields["JobState"],
                fields.get("NodeList", ""),
                exit_code=code,
                signal=sig,
                elapsed_s=_elapsed_seconds(fields.get("RunTime", "")),
                reason="" if reason == "None" else reason,
                work_dir=fields.get("WorkDir", ""),
                source="scontrol",
                **({"node_count": int(count)} if count.isdigit() and fields.get("NodeList") else {}),
            )
        )
    return jobs


# ---------------------------------------------------------------- --json output


def _number(value: Any) -> int | None:
    """A JSON number as Slurm prints it: plain (22.05) or ``{"set": .., "infinite": .., "number": ..}``."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and not value.get("infinite") else None
    if isinstance(value, bool) or value is None:
        return None
    return int(value) if isinstance(value, (int, float)) else None


def _json_state(value: Any) -> str:
    """``"RUNNING"`` (22.05) or ``["RUNNING"]`` (23.02 and later)."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "")


def _json_id(
    job_id: int, array_id: int | None, task: int | None, tasks: str, het_id: int | None, offset: int | None
) -> str:
    if array_id:
        if task is not None:
            return f"{array_id}_{task}"
        if tasks:
            return f"{array_id}_[{tasks}]"
    if het_id and offset is not None:
        return f"{het_id}+{offset}"
    return str(job_id)


def _json_jobs(output: str) -> list[dict[str, Any]]:
    """The ``jobs`` list of a squeue/sacct ``--json`` document; ValueError when it is not one."""
    data = json.loads(output)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ValueError("no 'jobs' list in the JSON output")
    return data["jobs"]


def _wait_status(value: Any) -> tuple[int | None, int | None]:
    """squeue --json's exit code: a raw wait status (22.05) or ``{return_code, signal}`` (later)."""
    if isinstance(value, dict):
        signal = value.get("signal") if isinstance(value.get("signal"), dict) else {}
        return _number(value.get("return_code")), _number(signal.get("id"))
    status = _number(value)
    if status is None:
        return None, None
    return (status >> 8) & 0xFF, status & 0x7F


def parse_squeue_json(output: str, now: int) -> list[JobInfo]:
    """Parse ``squeue --json`` (every job of the cluster; the caller selects its own).

    ``now`` (epoch seconds) gives a running job's elapsed time, which the JSON has only as a start time.
    """
    jobs = []
    for job in _json_jobs(output):
        start, end = _number(job.get("start_time")), _number(job.get("end_time"))
        state = _json_state(job.get("job_state"))
        elapsed = 0 if state == "PENDING" else None
        if start and state != "PENDING":
            stop = end if state in TERMINAL_STATES and end else now
            elapsed = max(0, stop - start)
        code, sig = _wait_status(job.get("exit_code"))
        reason = str(job.get("state_reason") or "")
        jobs.append(
            _record(
                _json_id(
                    job["job_id"],
                    _number(job.get("array_job_id")),
                    _number(job.get("array_task_id")),
                    str(job.get("array_task_string") or ""),
                    _number(job.get("het_job_id")),
                    _number(job.get("het_job_offset")),
                ),
                str(job.get("name", "")),
                state,
                str(job.get("nodes") or ""),
                exit_code=code if state in TERMINAL_STATES else None,
                signal=sig if state in TERMINAL_STATES else None,
                elapsed_s=elapsed,
                reason="" if reason == "None" else reason,
                work_dir=str(job.get("current_working_directory") or ""),
                source="squeue --json",
            )
        )
    return jobs


def _latest_runs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per job: the latest run of a requeued job. ``sacct --json`` lists every run of a job that
    Slurm requeued (a NODE_FAIL record, then the run after it), where sacct's text output, without
    ``--duplicates``, shows only the latest; an earlier run's state is not the job's."""
    latest: dict[Any, tuple[int, int, dict[str, Any]]] = {}
    for order, job in enumerate(jobs):
        submitted = _number((job.get("time") or {}).get("submission")) or 0
        key = (
            job.get("job_id"),
            json.dumps(job.get("array"), sort_keys=True),
            json.dumps(job.get("het"), sort_keys=True),
        )
        if key not in latest or (submitted, order) >= latest[key][:2]:
            latest[key] = (submitted, order, job)
    return [job for _submitted, _order, job in sorted(latest.values(), key=lambda item: item[1])]


def parse_sacct_json(output: str) -> list[JobInfo]:
    """Parse ``sacct --json`` (allocations in ``jobs``; their steps are nested and not read)."""
    jobs = []
    for job in _latest_runs(_json_jobs(output)):
        array, het = job.get("array") or {}, job.get("het") or {}
        state = job.get("state") or {}
        exit_code = job.get("exit_code") or {}
        signal = exit_code.get("signal") or {}
        count = _number(job.get("allocation_nodes"))
        jobs.append(
            _record(
                _json_id(
                    job["job_id"],
                    _number(array.get("job_id")),
                    _number(array.get("task_id")),
                    str(array.get("task") or ""),
                    _number(het.get("job_id")),
                    _number(het.get("job_offset")),
                ),
                str(job.get("name", "")),
                _json_state(state.get("current")),
                str(job.get("nodes") or ""),
                exit_code=_number(exit_code.get("return_code")),
                signal=_number(signal.get("signal_id", signal.get("id"))),
                elapsed_s=_number((job.get("time") or {}).get("elapsed")),
                work_dir=str(job.get("working_directory") or ""),
                source="sacct --json",
                **({"node_count": count} if count is not None else {}),
            )
        )
    return jobs


# ---------------------------------------------------------------- one answer


def _summary(record: JobInfo) -> dict[str, Any]:
    return {
        "job_id": record.job_id,
        "state": record.state,
        "exit_code": record.exit_code,
        "nodelist": record.nodelist,
    }


def _combined_state(records: list[JobInfo]) -> str:
    """One state for several records: running while any runs, failed when any ended badly."""
    states = [r.state for r in records]
    if any(r.active for r in records):
        if "RUNNING" in states:
            return "RUNNING"
        return next((s for s in states if s != "PENDING" and s in ACTIVE_STATES), "PENDING")
    if all(r.terminal for r in records):
        return next((s for s in states if s != "COMPLETED"), "COMPLETED")
    return next(s for s in states if s not in TERMINAL_STATES)


def combine(job_id: str, records: list[JobInfo]) -> JobInfo | None:
    """Fold the records of one job (its array tasks or het components) into the answer for ``job_id``."""
    if not records:
        return None
    state = _combined_state(records)
    nodes = list(dict.fromkeys(n for r in records for n in r.nodes))
    nodelists = list(dict.fromkeys(r.nodelist for r in records if r.nodelist))
    codes = [r for r in records if r.exit_code is not None]
    worst = max(codes, key=lambda r: (r.exit_code or 0, r.signal or 0), default=None)
    elapsed = [r.elapsed_s for r in records if r.elapsed_s is not None]
    return JobInfo(
        job_id=job_id,
        name=records[0].name,
        state=state,
        exit_code=worst.exit_code if worst else None,
        signal=worst.signal if worst else None,
        nodes=nodes,
        nodelist=",".join(nodelists),
        node_count=sum(r.node_count for r in records) if len(records) > 1 else records[0].node_count,
        elapsed_s=max(elapsed) if elapsed else None,
        reason=next((r.reason for r in records if r.reason), ""),
        work_dir=next((r.work_dir for r in records if r.work_dir), ""),
        source=records[0].source,
        components=[_summary(r) for r in records],
    )


def parse_sbatch(output: str) -> str:
    """Return the job id from ``sbatch --parsable`` (``<id>`` or ``<id>;<cluster>``)."""
    job_id = output.strip().split(";")[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch did not return a job id: {output.strip()!r}")
    return job_id


# ---------------------------------------------------------------- what users read


def _label(info: JobInfo, name: str = "") -> str:
    name = info.name or name
    return f"job {info.job_id}" + (f" ({name})" if name else "")


def progress_line(info: JobInfo, waited_s: float, timeout_s: int, name: str = "") -> str:
    """One line per interval while a job is followed: state, elapsed time, nodes, and the wait so far."""
    where = f" on {info.nodelist}" if info.nodelist else ""
    why = f" ({info.reason})" if info.reason and info.state == "PENDING" else ""
    return (
        f"{_label(info, name)}: {info.state}{why}, elapsed {format_seconds(info.elapsed_s)}{where}"
        f" [waited {format_seconds(int(waited_s))} of {format_seconds(timeout_s)}]"
    )


def timeout_message(info: JobInfo, timeout_s: int, name: str = "") -> str:
    """Why the wait ended, where the job is, and the two ways on: cancel it or follow it again."""
    why = f", reason {info.reason}" if info.reason and info.state == "PENDING" else ""
    where = f" on {info.nodelist}" if info.nodelist else ""
    return (
        f"{_label(info, name)} is still {info.state.lower()} ({info.state}{why}, elapsed "
        f"{format_seconds(info.elapsed_s)}{where}) after the {timeout_s} s timeout; it was left in the "
        "queue. "
        f"Cancel it with `scancel {info.job_id}`, or follow it again with trainstack.cluster.slurm_job "
        f"job_id={info.job_id} state=query wait=true."
    )
