#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Submit, follow and cancel Slurm batch jobs: submitted by name, followed by id."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_job
short_description: Submit a Slurm batch job by name, follow it by id to its end, report it, or cancel it
version_added: 0.1.0
description:
  - Submits a batch script with C(sbatch), identified by its job name. A job of that name that is still
    pending or running is adopted instead of submitted again, so re-running a playbook does not start a second
    job unless O(force=true).
  - Follows the job by its id, never by name again, through C(squeue) while it is queued; once it has left the
    queue, C(sacct) where the cluster keeps accounting and C(scontrol show job) where it does not (for example
    ParallelCluster's default cluster). C(--json) output is read where the installed Slurm offers it and
    honours the job filter; otherwise the parsable text output.
  - Heterogeneous jobs (C(1234+0), C(1234+1)) and arrays (C(1234_7), C(1234_[1-3])) are followed as one
    job whose state is RUNNING while any part runs and the first failed part's state once all have ended;
    RV(components) lists the parts.
  - With O(wait=true) the task waits until the job ends or O(timeout) passes. The action plugin of the same
    name prints a progress line (state, elapsed time, nodes) every O(progress_interval) seconds; it runs the
    module for one interval at a time, because a module cannot print while it runs. When O(timeout) passes the
    task fails, saying whether the job is still pending or running, its id, and how to cancel it
    (C(scancel <id>)) or follow it again (O(job_id) with O(state=query)); the job itself is left alone.
  - O(state=absent) cancels the job O(job_id), or every active job of that name. O(state=query) only reports.
  - Supports check mode (reports what would be submitted or cancelled; does not wait).
options:
  name:
    description:
      - Job name (C(sbatch --job-name)); the identity used for idempotence.
      - Required with O(state=present); with O(state=query) or O(state=absent) one of O(name) and O(job_id).
    type: str
  job_id:
    description:
      - Id of an existing job to follow (O(state=query)) or cancel (O(state=absent)), as C(sbatch) or
        C(squeue) print it, for example C(1234), C(1234_7), C(1234_[1-3]) or C(1234+0).
      - Takes precedence over O(name); not used with O(state=present).
    type: str
  script:
    description: Path on the target of the batch script to submit. Required with O(state=present).
    type: path
  script_content:
    description:
      - The batch script's text. When a job is submitted, it is written to O(script) first (mode C(0755), its
        directory created, mode C(0755)), so that writing and submitting take one module run, not three.
      - An adopted job keeps the script it was submitted with; nothing is written then, nor in check mode.
    type: str
  chdir:
    description: Working directory for C(sbatch).
    type: path
  sbatch_args:
    description: Extra C(sbatch) arguments (for example C(--partition=gpu)).
    type: list
    elements: str
    default: []
  state:
    description:
      - C(present) submits (or adopts) the job; C(absent) cancels; C(query) reports the job O(job_id), or the
        newest job of that O(name).
    type: str
    choices: [present, absent, query]
    default: present
  force:
    description: Submit a new job even when one of that name is active.
    type: bool
    default: false
  wait:
    description: Wait until the job ends (with O(state=present) or O(state=query)).
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait with O(wait=true); must be greater than 0. When it passes, the task fails and the job
        is left as it is.
    type: int
    default: 3600
  poll_interval:
    description:
      - Seconds between polls of Slurm; at least 1. Each poll is a C(squeue) or C(sacct) call that the
        cluster's controller answers.
    type: float
    default: 2.0
  progress_interval:
    description:
      - Seconds between progress lines while waiting (printed by the action plugin); must be greater than 0.
    type: int
    default: 30
  until:
    description: With O(wait=true), stop waiting as soon as the job reaches one of these states.
    type: list
    elements: str
    default: []
author: trainstack maintainers (@trainstack)
"""

EXAMPLES = r"""
- name: Submit the training job, or adopt the one already queued, and follow it to its end
  trainstack.cluster.slurm_job:
    name: fsdp-tiny
    script: /fsx/trainstack/runs/fsdp-tiny/job.sbatch
    chdir: /fsx/trainstack/runs/fsdp-tiny
    wait: true
    timeout: 7200
  register: job

- name: Write the batch script into a new run directory and submit it, in one module run
  trainstack.cluster.slurm_job:
    name: fsdp-tiny
    script: /fsx/trainstack/runs/fsdp-tiny-2/job.sbatch
    script_content: "{{ lookup('ansible.builtin.template', 'job.sbatch.j2') }}"
    chdir: /fsx/trainstack/runs/fsdp-tiny-2

- name: Follow a job again by its id after a timeout (progress line every minute)
  trainstack.cluster.slurm_job:
    job_id: "{{ job.job_id }}"
    state: query
    wait: true
    timeout: 7200
    progress_interval: 60

- name: Wait only until one array task starts
  trainstack.cluster.slurm_job:
    job_id: 1234_7
    state: query
    wait: true
    until: [RUNNING]

- name: Cancel it
  trainstack.cluster.slurm_job:
    job_id: "{{ job.job_id }}"
    state: absent
"""

RETURN = r"""
job_id:
  description: Slurm job id (empty when no job of that name exists).
  returned: always
  type: str
state:
  description: Job state (PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, ...); C(NONE) when there is no job.
  returned: always
  type: str
submitted:
  description: Whether this call submitted a new job.
  returned: always
  type: bool
active:
  description: The job is pending or running (it may still change).
  returned: when there is a job
  type: bool
terminal:
  description: The job has ended (its state will not change).
  returned: when there is a job
  type: bool
exit_code:
  description: Exit code of the batch script (the highest of the parts), once the job has ended.
  returned: when there is a job
  type: int
nodes:
  description: Host names allocated to the job.
  returned: always
  type: list
  elements: str
nodelist:
  description: The allocated nodes as Slurm prints them (C(ts-compute[1-2])).
  returned: always
  type: str
elapsed_s:
  description: Seconds the job has run.
  returned: when known
  type: int
work_dir:
  description: The job's working directory (where its run files are).
  returned: when there is a job
  type: str
reason:
  description: Why a pending job waits (squeue's reason).
  returned: always
  type: str
source:
  description:
    - Which command reported the state (C(squeue), C(squeue --json), C(sacct), C(sacct --json), C(scontrol)).
  returned: when there is a job
  type: str
components:
  description: The parts of the job (one for a plain job; array tasks or heterogeneous components otherwise).
  returned: always
  type: list
  elements: dict
  contains:
    job_id:
      description: The part's id (C(1234_7), C(1234+1)).
      type: str
    state:
      description: The part's state.
      type: str
    exit_code:
      description: The part's exit code, when Slurm reports one.
      type: int
    nodelist:
      description: The part's nodes as Slurm prints them.
      type: str
timed_out:
  description: The wait ended at O(timeout) with the job still active (the task then fails).
  returned: always
  type: bool
cancelled:
  description: Job ids cancelled (O(state=absent)).
  returned: with O(state=absent)
  type: list
  elements: str
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.files.atomic import write_text_atomic
from ansible_collections.trainstack.cluster.plugins.module_utils.slurm.slurm_jobs import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    JobInfo,
    base_job_id,
    check_job_id,
    combine,
    parse_sacct,
    parse_sacct_json,
    parse_sbatch,
    parse_scontrol,
    parse_squeue,
    parse_squeue_json,
    select_records,
    timeout_message,
)

# Polls below this only load slurmctld and slurmdbd: a job that ends is seen within a second either way.
MIN_POLL_INTERVAL = 1.0
# Name lookups without JSON: id, state, then the name, which may hold any character squeue prints.
NAME_LOOKUP_FORMAT = "%i|%T|%j"


class Slurm:
    """The job commands of one module run; it learns on the way what this cluster offers.

    ``--json`` is tried first and dropped for the rest of the run where the tool lacks it, fails, or (squeue
    of Slurm 22.05) ignores the job filter and lists every job of the cluster, which the text form does not.
    A failing ``sacct`` means no accounting (ParallelCluster's default): it is not asked again, and ended jobs
    are read from ``scontrol show job`` instead.
    """

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.squeue_json = True
        self.sacct_json = True
        self.accounting = True
        self.accounting_error = ""

    def _run(self, argv: list[str]) -> tuple[int, str, str]:
        return self.module.run_command(argv)

    def squeue(self, job_id: str) -> list[JobInfo]:
        """Records squeue has for this job (also ended ones, for MinJobAge seconds)."""
        base = base_job_id(job_id)
        if self.squeue_json:
            rc, out, _err = self._run(["squeue", "--json", "--states=all", "--job", base])
            try:
                everything = parse_squeue_json(out, int(time.time())) if rc == 0 else None
            except (ValueError, KeyError, TypeError):
                everything = None
            if everything is not None:
                mine = [r for r in everything if base_job_id(r.job_id) == base]
                self.squeue_json = len(mine) == len(everything)
                return select_records(job_id, mine)
            self.squeue_json = False
        argv = ["squeue", "--noheader", "--states=all", "--job", base, "--format", SQUEUE_FORMAT]
        rc, out, _err = self._run(argv)
        return select_records(job_id, parse_squeue(out)) if rc == 0 else []

    def sacct(self, job_id: str) -> list[JobInfo] | None:
        """Records accounting has for this job; None where the cluster keeps no accounting."""
        if not self.accounting:
            return None
        base = base_job_id(job_id)
        if self.sacct_json:
            rc, out, _err = self._run(["sacct", "--json", "-j", base])
            try:
                everything = parse_sacct_json(out) if rc == 0 else None
            except (ValueError, KeyError, TypeError, AttributeError):
                everything = None
            if everything is not None:
                mine = [r for r in everything if base_job_id(r.job_id) == base]
                self.sacct_json = len(mine) == len(everything)
                return select_records(job_id, mine)
            self.sacct_json = False
        argv = ["sacct", "--noheader", "--parsable2", "-X", "-j", base, "--format", SACCT_FIELDS]
        rc, out, err = self._run(argv)
        if rc != 0:
            self.accounting = False
            self.accounting_error = (err or out).strip()
            return None
        return select_records(job_id, parse_sacct(out))

    def scontrol(self, job_id: str) -> list[JobInfo]:
        """Records slurmctld still holds for this job, with exit codes; empty once it has forgotten it."""
        rc, out, _err = self._run(["scontrol", "--oneliner", "show", "job", base_job_id(job_id)])
        return select_records(job_id, parse_scontrol(out)) if rc == 0 else []

    def lookup(self, job_id: str) -> JobInfo | None:
        """The job's state: squeue while it is queued; then sacct, or scontrol where sacct cannot tell."""
        queued = self.squeue(job_id)
        if any(r.active for r in queued):
            return combine(job_id, queued)
        accounted = self.sacct(job_id)
        if accounted and all(r.terminal for r in accounted):
            return combine(job_id, accounted)
        # No accounting, or accounting not caught up yet: slurmctld's own record has the exit code.
        best = self.scontrol(job_id) or accounted or queued
        return combine(job_id, best) if best else None


def _run(module: AnsibleModule, argv: list[str], cwd: str | None = None) -> str:
    rc, out, err = module.run_command(argv, cwd=cwd)
    if rc != 0:
        module.fail_json(msg=f"{argv[0]} failed ({rc}): {err.strip() or out.strip()}", cmd=argv)
    return out


def write_script(module: AnsibleModule, path: str, content: str) -> None:
    """Write the batch script beside where it runs, whole or not at all: a temporary file in the same
    directory, renamed over the path, so that sbatch never reads a half-written script."""
    try:
        write_text_atomic(path, content, 0o755, dir_mode=0o755)
    except OSError as err:
        module.fail_json(msg=f"could not write the batch script {path}: {err}. Nothing was submitted.")


def _named_jobs_json(module: AnsibleModule, name: str) -> list[JobInfo] | None:
    """Queued jobs of exactly this name from ``squeue --json``, or None where this Slurm has no JSON output.

    The name is compared here, not only by squeue: some releases ignore filters under ``--json``."""
    rc, out, _err = module.run_command(["squeue", "--json", "--name", name])
    if rc != 0:
        return None
    try:
        return [j for j in parse_squeue_json(out, int(time.time())) if j.name == name]
    except (ValueError, KeyError, TypeError):
        return None


def _named_jobs_text(module: AnsibleModule, name: str) -> list[JobInfo]:
    """Queued jobs of exactly this name from squeue's text output, the name printed last: a name that holds
    the field separator then stays whole instead of shifting the other fields."""
    out = _run(module, ["squeue", "--noheader", "--name", name, "--format", NAME_LOOKUP_FORMAT])
    jobs = []
    for line in out.splitlines():
        fields = line.strip().split("|", 2)
        if len(fields) == 3 and fields[2] == name:
            jobs.append(JobInfo(job_id=fields[0], name=fields[2], state=fields[1], source="squeue"))
    return jobs


def active_jobs(module: AnsibleModule, name: str) -> list[JobInfo]:
    """Jobs of this name still in the queue, newest first (``squeue --json`` where Slurm offers it)."""
    found = _named_jobs_json(module, name)
    jobs = [j for j in (found if found is not None else _named_jobs_text(module, name)) if j.active]
    return sorted(jobs, key=lambda j: int(base_job_id(j.job_id)), reverse=True)


def newest_job_id(module: AnsibleModule, slurm: Slurm, name: str) -> str:
    """The newest job of this name: queued, else remembered by sacct (7 days) or by slurmctld."""
    active = active_jobs(module, name)
    if active:
        return base_job_id(active[0].job_id)
    argv = ["sacct", "--noheader", "--parsable2", "-X", "--name", name, "--starttime", "now-7days"]
    rc, out, _err = module.run_command([*argv, "--format=JobID"])
    if rc != 0:
        argv = ["squeue", "--noheader", "--states=all", "--name", name]
        rc, out, _err = module.run_command([*argv, "--format=%i"])
    ids = {base_job_id(line.strip()) for line in out.splitlines()} if rc == 0 else set()
    ids = {i for i in ids if i.isdigit()}
    return max(ids, key=int) if ids else ""


def _done(info: JobInfo, until: set[str]) -> bool:
    return info.terminal or info.state in until


def wait_for(slurm: Slurm, job_id: str, timeout: int, interval: float, until: set[str]) -> JobInfo | None:
    """Poll until the job ends (or reaches a state in ``until``), or the timeout passes."""
    deadline = time.monotonic() + timeout
    info = slurm.lookup(job_id)
    while info is not None and not _done(info, until):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
        info = slurm.lookup(job_id) or info
    return info


def result(
    info: JobInfo | None, *, submitted: bool, changed: bool, timed_out: bool = False
) -> dict[str, Any]:
    data: dict[str, Any] = {"changed": changed, "submitted": submitted, "timed_out": timed_out}
    if info is None:
        data.update(job_id="", state="NONE", nodes=[], nodelist="", reason="", components=[])
    else:
        data.update(info.as_dict())
    return data


def validate(module: AnsibleModule) -> None:
    """Refuse bad values before any Slurm command runs, naming the option and the rule."""
    p = module.params
    for key in ("timeout", "progress_interval"):
        if p[key] <= 0:
            module.fail_json(msg=f"{key} must be greater than 0 seconds (got {p[key]:g})")
    if p["poll_interval"] < MIN_POLL_INTERVAL:
        module.fail_json(
            msg=f"poll_interval must be at least {MIN_POLL_INTERVAL:g} second (got {p['poll_interval']:g}): "
            "every poll runs squeue or sacct, which slurmctld and slurmdbd answer for the whole cluster"
        )
    if p["job_id"]:
        try:
            p["job_id"] = check_job_id(p["job_id"])
        except ValueError as err:
            module.fail_json(msg=str(err))
        if p["state"] == "present":
            module.fail_json(
                msg="job_id names a job that already exists: use it with state=query (follow) or "
                "state=absent (cancel); state=present submits by name"
            )


def cancel(module: AnsibleModule, slurm: Slurm) -> None:
    """state=absent: cancel the named job id, or every active job of the name."""
    p = module.params
    if p["job_id"]:
        info = slurm.lookup(p["job_id"])
        ids = [p["job_id"]] if info is not None and info.active else []
    else:
        ids = list(dict.fromkeys(base_job_id(j.job_id) for j in active_jobs(module, p["name"])))
    if ids and not module.check_mode:
        _run(module, ["scancel", *ids])
    module.exit_json(changed=bool(ids), cancelled=ids, submitted=False)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str"},
            "job_id": {"type": "str"},
            "script": {"type": "path"},
            "script_content": {"type": "str"},
            "chdir": {"type": "path"},
            "sbatch_args": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "force": {"type": "bool", "default": False},
            "wait": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 3600},
            "poll_interval": {"type": "float", "default": 2.0},
            "progress_interval": {"type": "int", "default": 30},
            "until": {"type": "list", "elements": "str", "default": []},
        },
        required_one_of=[("name", "job_id")],
        required_if=[("state", "present", ("name", "script"))],
        supports_check_mode=True,
    )
    validate(module)
    p = module.params
    slurm = Slurm(module)

    if p["state"] == "absent":
        cancel(module, slurm)

    submitted = False
    if p["job_id"]:
        job_id = p["job_id"]
    elif p["state"] == "query":
        job_id = newest_job_id(module, slurm, p["name"])
    else:
        active = [] if p["force"] else active_jobs(module, p["name"])
        if active:
            job_id = base_job_id(active[0].job_id)
        elif module.check_mode:
            module.exit_json(**result(None, submitted=True, changed=True))
        else:
            if p["script_content"] is not None:
                write_script(module, p["script"], p["script_content"])
            argv = ["sbatch", "--parsable", f"--job-name={p['name']}", *p["sbatch_args"], p["script"]]
            out = _run(module, argv, cwd=p["chdir"])
            try:
                job_id = parse_sbatch(out)
            except ValueError as err:
                module.fail_json(msg=str(err))
            submitted = True

    if not job_id:
        module.exit_json(**result(None, submitted=False, changed=False))
    until = set(p["until"])
    if p["wait"] and not module.check_mode:
        info = wait_for(slurm, job_id, p["timeout"], p["poll_interval"], until)
    else:
        info = slurm.lookup(job_id)
    if info is None:
        why = f" (sacct: {slurm.accounting_error})" if slurm.accounting_error else ""
        module.fail_json(
            msg=f"job {job_id} is unknown to squeue, sacct and scontrol{why}",
            **{**result(None, submitted=submitted, changed=submitted), "job_id": job_id},
        )
    if p["wait"] and not module.check_mode and not _done(info, until):
        module.fail_json(
            msg=timeout_message(info, p["timeout"], p["name"] or ""),
            **result(info, submitted=submitted, changed=submitted, timed_out=True),
        )
    module.exit_json(**result(info, submitted=submitted, changed=submitted))


if __name__ == "__main__":
    main()
