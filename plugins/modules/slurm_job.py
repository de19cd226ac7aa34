#!/usr/bin/python
"""Submit, follow and cancel Slurm batch jobs by name."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_job
short_description: Submit a Slurm batch job by name, wait for it, report its end, or cancel it
version_added: 0.1.0
description:
  - Submits a batch script with C(sbatch), identified by its job name. A job of that name that is still
    pending or running is adopted instead of submitted again, so re-running a playbook does not start a second
    job unless O(force=true).
  - With O(wait=true) polls C(squeue), then C(sacct) once the job has left the queue, until the job ends or
    O(timeout) passes, and reports state, exit code, nodes and elapsed time.
  - O(state=absent) cancels every active job of that name. O(state=query) only reports.
  - Supports check mode (reports what would be submitted or cancelled).
options:
  name:
    description: Job name (C(sbatch --job-name)); the identity used for idempotence.
    type: str
    required: true
  script:
    description: Path on the target of the batch script to submit. Required with O(state=present).
    type: path
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
      - C(present) submits (or adopts) the job; C(absent) cancels active jobs of that name; C(query) reports
        the newest job of that name.
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
    description: Seconds to wait with O(wait=true); the job is left running when it passes.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between polls.
    type: float
    default: 2.0
  until:
    description: With O(wait=true), stop waiting as soon as the job reaches one of these states.
    type: list
    elements: str
    default: []
author: trainstack maintainers (@trainstack)
"""

EXAMPLES = r"""
- name: Submit the training job, or adopt the one already running
  trainstack.cluster.slurm_job:
    name: fsdp-tiny
    script: /fsx/trainstack/runs/fsdp-tiny/job.sbatch
    chdir: /fsx/trainstack/runs/fsdp-tiny
  register: job

- name: Wait for it to end (fails when it does not complete)
  trainstack.cluster.slurm_job:
    name: fsdp-tiny
    state: query
    wait: true
    timeout: 7200

- name: Cancel it
  trainstack.cluster.slurm_job:
    name: fsdp-tiny
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
exit_code:
  description: Exit code of the batch script, once the job has ended.
  returned: when the job has ended
  type: int
nodes:
  description: Host names allocated to the job.
  returned: always
  type: list
  elements: str
elapsed_s:
  description: Seconds the job has run.
  returned: when known
  type: int
work_dir:
  description: The job's working directory (where its run files are).
  returned: always
  type: str
reason:
  description: Why a pending job waits (squeue's reason).
  returned: always
  type: str
timed_out:
  description: The wait ended at O(timeout) with the job still active.
  returned: always
  type: bool
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.slurm_jobs import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    JobInfo,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
)


def _run(module: AnsibleModule, argv: list[str], cwd: str | None = None) -> str:
    rc, out, err = module.run_command(argv, cwd=cwd)
    if rc != 0:
        module.fail_json(msg=f"{argv[0]} failed ({rc}): {err.strip() or out.strip()}", cmd=argv)
    return out


def active_jobs(module: AnsibleModule, name: str) -> list[JobInfo]:
    """Jobs of this name still in the queue, newest first."""
    out = _run(module, ["squeue", "--noheader", "--name", name, "--format", SQUEUE_FORMAT])
    return sorted(parse_squeue(out), key=lambda j: int(j.job_id.split("_")[0]), reverse=True)


def job_info(module: AnsibleModule, job_id: str) -> JobInfo | None:
    """Current state of one job: squeue while queued, sacct after (or when squeue has forgotten it)."""
    # squeue forgets a job MinJobAge seconds after it ends and then errors; sacct has the rest.
    rc, out, _ = module.run_command(
        ["squeue", "--noheader", "--job", job_id, "--format", SQUEUE_FORMAT, "--states=all"]
    )
    queued = parse_squeue(out) if rc == 0 else []
    if queued and queued[0].active:
        return queued[0]
    rc, out, _ = module.run_command(
        ["sacct", "--noheader", "--parsable2", "-X", "-j", job_id, "--format", SACCT_FIELDS]
    )
    accounted = parse_sacct(out) if rc == 0 else None
    return accounted or (queued[0] if queued else None)


def newest_job_id(module: AnsibleModule, name: str) -> str:
    """The newest job of this name, queued or finished (sacct remembers finished ones)."""
    active = active_jobs(module, name)
    if active:
        return active[0].job_id
    rc, out, _ = module.run_command(
        [
            "sacct",
            "--noheader",
            "--parsable2",
            "-X",
            "--name",
            name,
            "--starttime",
            "now-7days",
            "--format=JobID",
        ]
    )
    ids = [line.strip() for line in out.splitlines() if line.strip().isdigit()] if rc == 0 else []
    return max(ids, key=int) if ids else ""


def wait_for(module: AnsibleModule, job_id: str, timeout: int, interval: float, until: set[str]) -> JobInfo:
    """Poll until the job ends (or reaches a state in ``until``), or the timeout passes."""
    deadline = time.monotonic() + timeout
    info = job_info(module, job_id)
    while info is not None and not info.terminal and info.state not in until:
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
        info = job_info(module, job_id) or info
    if info is None:
        module.fail_json(msg=f"job {job_id} is unknown to squeue and sacct")
    return info


def result(
    info: JobInfo | None, *, submitted: bool, changed: bool, timed_out: bool = False
) -> dict[str, Any]:
    data: dict[str, Any] = {"changed": changed, "submitted": submitted, "timed_out": timed_out}
    if info is None:
        data.update(job_id="", state="NONE", nodes=[], reason="")
    else:
        data.update(info.as_dict())
    return data


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "script": {"type": "path"},
            "chdir": {"type": "path"},
            "sbatch_args": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "force": {"type": "bool", "default": False},
            "wait": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 3600},
            "poll_interval": {"type": "float", "default": 2.0},
            "until": {"type": "list", "elements": "str", "default": []},
        },
        required_if=[("state", "present", ("script",))],
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]

    if p["state"] == "absent":
        jobs = active_jobs(module, name)
        if jobs and not module.check_mode:
            _run(module, ["scancel", *[j.job_id for j in jobs]])
        module.exit_json(changed=bool(jobs), cancelled=[j.job_id for j in jobs], submitted=False)

    submitted = False
    if p["state"] == "query":
        job_id = newest_job_id(module, name)
    else:
        active = [] if p["force"] else active_jobs(module, name)
        if active:
            job_id = active[0].job_id
        elif module.check_mode:
            module.exit_json(changed=True, submitted=True, job_id="", state="NONE", nodes=[], timed_out=False)
        else:
            argv = ["sbatch", "--parsable", f"--job-name={name}", *p["sbatch_args"], p["script"]]
            job_id = parse_sbatch(_run(module, argv, cwd=p["chdir"]))
            submitted = True

    if not job_id:
        module.exit_json(**result(None, submitted=False, changed=False))
    if p["wait"] and not module.check_mode:
        info = wait_for(module, job_id, p["timeout"], p["poll_interval"], set(p["until"]))
        timed_out = not info.terminal and info.state not in set(p["until"])
    else:
        info, timed_out = job_info(module, job_id), False
    module.exit_json(**result(info, submitted=submitted, changed=submitted, timed_out=timed_out))


if __name__ == "__main__":
    main()
