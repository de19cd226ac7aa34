"""Verifier for the slurm_cluster scenario: the cluster schedules, runs and accounts real jobs."""

import re
import time

import pytest

HEAD = "ts-m-slurm-head"
COMPUTE = ["ts-m-slurm-c1", "ts-m-slurm-c2"]


@pytest.fixture
def head(host):
    if host.backend.get_hostname() != HEAD:
        pytest.skip("runs on the controller")
    return host


def _job_state(head, job_id: str) -> str:
    return head.check_output(f"squeue --noheader --job {job_id} --format %T || true").strip()


def _wait_for(predicate, timeout: float = 90, step: float = 2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def test_munge_key_is_private(host):
    key = host.file("/etc/munge/munge.key")
    assert (key.user, key.group, key.mode) == ("munge", "munge", 0o400)
    assert key.size == 1024
    assert host.service("munge").is_running


def test_sinfo_shows_both_compute_nodes_idle(head):
    assert _wait_for(lambda: "idle" in head.check_output("sinfo --noheader"))
    out = head.check_output("sinfo --noheader --format '%P %a %D %t %N'")
    assert out.splitlines() == ["compute* up 2 idle ts-m-slurm-c[1-2]"]


def test_srun_runs_on_both_nodes(head):
    out = head.check_output("srun --nodes=2 --ntasks-per-node=1 hostname")
    assert sorted(out.split()) == COMPUTE


def test_sbatch_job_completes_and_is_accounted(head):
    script = "#!/bin/sh\\nsrun hostname\\n"
    head.check_output(f"printf '{script}' > /tmp/verify-job.sh")
    job_id = head.check_output("cd /tmp && sbatch --parsable --wait --nodes=2 /tmp/verify-job.sh").strip()
    assert re.fullmatch(r"\d+", job_id)

    def accounted() -> bool:
        rows = head.check_output(
            f"sacct --noheader --parsable2 -X -j {job_id} --format=State,NNodes,ExitCode"
        )
        return rows.strip() == "COMPLETED|2|0:0"

    assert _wait_for(accounted, timeout=30)


def test_pending_job_survives_controller_restart(head):
    # Ask for more nodes than exist in a held state, so it stays pending, then restart slurmctld.
    job_id = head.check_output("sbatch --parsable --hold --nodes=2 --wrap 'sleep 1'").strip()
    assert _job_state(head, job_id) == "PENDING"
    head.check_output("systemctl restart slurmctld")
    assert _wait_for(lambda: head.run("scontrol ping").rc == 0, timeout=60)
    assert _job_state(head, job_id) == "PENDING"
    head.check_output(f"scontrol release {job_id}")
    assert _wait_for(lambda: _job_state(head, job_id) == "", timeout=60)
    state = head.check_output(f"sacct --noheader --parsable2 -X -j {job_id} --format=State")
    assert state.strip() == "COMPLETED"


def test_controller_outlasts_slurmdbd_coming_up_late(head):
    # A head killed before slurmctld first saved its TRES state boots with no state files; if slurmctld then
    # starts before slurmdbd listens, it exits ("we have no TRES from it"), as a cold-started lab head did.
    # Recreate that: no saved TRES/association state, slurmdbd down. The role promises that systemd retries.
    state = "/var/lib/slurm/slurmctld"
    head.check_output("systemctl stop slurmctld slurmdbd")
    head.check_output(f"mkdir -p /root/ctld && mv {state}/last_tres* {state}/assoc_mgr_state* /root/ctld/")
    head.run("systemctl start slurmctld")
    log_tail = "tail -n 5 /var/log/slurm/slurmctld.log"
    assert _wait_for(lambda: "no TRES" in head.check_output(log_tail), timeout=30)
    assert head.run("scontrol ping").rc != 0
    head.check_output("systemctl start slurmdbd")
    assert _wait_for(lambda: head.run("scontrol ping").rc == 0, timeout=60)
    assert _wait_for(lambda: "idle" in head.check_output("sinfo --noheader"), timeout=60)
    assert head.check_output("systemctl show slurmctld --property=NRestarts") != "NRestarts=0"
