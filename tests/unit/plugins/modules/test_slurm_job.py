"""slurm_job follows a job by id through squeue, sacct and scontrol, and says what to do when a wait ends."""

from __future__ import annotations

import time

import pytest

from tests.unit.plugins.modules.conftest import FakeSlurm, answer

NO_ACCOUNTING = answer("sacct-disabled.err")
UNKNOWN = answer("squeue-unknown.err")
FAST = {"poll_interval": 1}


class VirtualClock:
    """The module's ``time`` with sleeps that pass at once: waits of many one-second polls take no time."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    @staticmethod
    def time() -> float:
        return time.time()


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    from ansible_collections.trainstack.cluster.plugins.modules import slurm_job

    virtual = VirtualClock()
    monkeypatch.setattr(slurm_job, "time", virtual)
    return virtual


def no_accounting(slurm: FakeSlurm) -> FakeSlurm:
    """A cluster without accounting (ParallelCluster's default): sacct fails whatever it is asked."""
    return slurm.on("sacct", NO_ACCOUNTING)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout", 0),
        ("timeout", -5),
        ("progress_interval", 0),
    ],
)
def test_non_positive_numbers_are_refused_before_slurm_is_asked(slurm, run_module, key, value) -> None:
    res = run_module(name="x", state="query", wait=True, **{key: value})
    assert res["failed"]
    assert res["msg"] == f"{key} must be greater than 0 seconds (got {value})"
    assert slurm.calls == []


@pytest.mark.parametrize("value", [0, -0.5, 0.001, 0.99])
def test_a_poll_interval_under_a_second_is_refused_before_slurm_is_asked(slurm, run_module, value) -> None:
    res = run_module(name="x", state="query", wait=True, poll_interval=value)
    assert res["failed"]
    assert res["msg"].startswith(f"poll_interval must be at least 1 second (got {value:g}): every poll runs")
    assert slurm.calls == []


@pytest.mark.parametrize("job_id", ["12ab", "1234_", "1234+x", "1234_[a]", "12 13"])
def test_malformed_job_id_is_refused(slurm, run_module, job_id) -> None:
    res = run_module(job_id=job_id, state="query")
    assert res["failed"]
    assert res["msg"].startswith("job_id must be a Slurm job id")
    assert repr(job_id) in res["msg"]
    assert slurm.calls == []


def test_job_id_does_not_submit(slurm, run_module) -> None:
    res = run_module(job_id="12", name="x", script="/tmp/job.sbatch")
    assert res["failed"]
    assert "use it with state=query (follow) or state=absent (cancel)" in res["msg"]
    assert slurm.calls == []


def test_name_or_job_id_is_required(slurm, run_module) -> None:
    res = run_module(state="query")
    assert res["failed"]
    assert "name, job_id" in res["msg"]


# ---------------------------------------------------------------- following by id


def test_follows_a_job_by_id_to_its_end_through_scontrol_without_accounting(slurm, run_module) -> None:
    no_accounting(slurm)
    slurm.on("squeue", answer("squeue-all-array.json"), match=("--json",))
    slurm.on("squeue", answer("squeue-running.txt"), answer("squeue-failed.txt"))
    slurm.on("scontrol", answer("scontrol-failed.txt"))
    res = run_module(job_id="12", state="query", wait=True, timeout=30, **FAST)
    assert not res.get("failed"), res
    assert (res["job_id"], res["state"], res["exit_code"], res["source"]) == ("12", "FAILED", 3, "scontrol")
    assert (res["nodes"], res["elapsed_s"], res["terminal"]) == (["vm"], 5, True)
    squeue = [c for c in slurm.calls if c[0] == "squeue"]
    # squeue --json of 22.05 lists every job of the cluster: asked once, then the text form with --job.
    assert ["--json" in c for c in squeue] == [True] + [False] * (len(squeue) - 1)
    assert all(c[c.index("--job") + 1] == "12" for c in squeue)
    assert not any("--name" in c for c in slurm.calls)
    # Accounting is known to be off after its first refusal (json then text), and not asked again.
    assert [c[:2] for c in slurm.calls if c[0] == "sacct"] == [["sacct", "--json"], ["sacct", "--noheader"]]
    assert ["scontrol", "--oneliner", "show", "job", "12"] in slurm.calls


def test_json_listing_is_filtered_to_the_job(slurm, run_module) -> None:
    """squeue --json (22.05) answers with every job; only the record of the job asked for is read."""
    no_accounting(slurm)
    slurm.on("squeue", answer("squeue-all-array.json"), match=("--json",))
    slurm.on("scontrol", answer("scontrol-unknown.err"))
    res = run_module(job_id="2", state="query")
    # Its exit code there is a raw wait status (768): exit code 3.
    assert (res["state"], res["exit_code"], res["source"]) == ("FAILED", 3, "squeue --json")
    assert [c["job_id"] for c in res["components"]] == ["2"]


def test_running_job_read_from_squeue_json(slurm, run_module) -> None:
    slurm.on("squeue", answer("squeue-all-array.json"), match=("--json",))
    res = run_module(job_id="13", state="query")
    assert (res["state"], res["source"], res["nodelist"]) == ("RUNNING", "squeue --json", "vm")
    assert [(c["job_id"], c["state"]) for c in res["components"]] == [
        ("13_1", "RUNNING"),
        ("13_2", "RUNNING"),
        ("13_3", "PENDING"),
    ]
    assert not any(c[0] in ("sacct", "scontrol") for c in slurm.calls)


# sacct with accounting is not among the recordings (they were made without slurmdbd): these answers are
# stand-ins in the layouts sacct --parsable2 and sacct --json (openapi/dbv0.0.38) print.
SACCT_JSON = (
    '{"jobs": [{"job_id": 21, "name": "fsdp-tiny", "state": {"current": "FAILED", "reason": "None"},'
    ' "exit_code": {"status": "FAILED", "return_code": 3}, "nodes": "ts-compute[1-2]", "allocation_nodes": 2,'
    ' "time": {"elapsed": 37}, "array": {"job_id": 0}, "het": {"job_id": 0}, "working_directory": "/r"},'
    ' {"job_id": 20, "name": "other", "state": {"current": "COMPLETED"}, "exit_code": {"return_code": 0},'
    ' "nodes": "ts-compute1", "time": {"elapsed": 5}, "array": {"job_id": 0}, "het": {"job_id": 0}}]}'
)
SACCT_TEXT = "21|fsdp-tiny|FAILED|3:0|ts-compute[1-2]|2|37|/r\n21.batch|batch|FAILED|3:0|ts-compute1|1|37|\n"


def test_ended_job_read_from_sacct_json_where_accounting_exists(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN)
    slurm.on("sacct", {"out": SACCT_JSON}, match=("--json",))
    slurm.on("sacct", {"out": SACCT_TEXT})
    res = run_module(job_id="21", state="query")
    assert (res["state"], res["exit_code"], res["source"]) == ("FAILED", 3, "sacct --json")
    assert (res["nodes"], res["node_count"], res["elapsed_s"]) == (["ts-compute1", "ts-compute2"], 2, 37)
    assert not any(c[0] == "scontrol" for c in slurm.calls)


def test_ended_job_read_from_sacct_text_where_json_is_missing(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN)
    slurm.on("sacct", {"rc": 1, "err": "sacct: unrecognized option '--json'\n"}, match=("--json",))
    slurm.on("sacct", {"out": SACCT_TEXT})
    res = run_module(job_id="21", state="query")
    assert (res["state"], res["exit_code"], res["source"]) == ("FAILED", 3, "sacct")
    assert [c[:2] for c in slurm.calls if c[0] == "sacct"] == [["sacct", "--json"], ["sacct", "--noheader"]]


# ---------------------------------------------------------------- arrays and heterogeneous jobs


@pytest.mark.parametrize(
    ("job_id", "state", "parts"),
    [
        ("13", "RUNNING", ["13_3", "13_2", "13_1"]),
        ("13_2", "RUNNING", ["13_2"]),
        ("13_3", "PENDING", ["13_3"]),
        ("13_[2-3]", "RUNNING", ["13_3", "13_2"]),
    ],
)
def test_array_job_and_tasks(slurm, run_module, job_id, state, parts) -> None:
    slurm.on("squeue", {"rc": 1, "err": "squeue: unrecognized option '--json'\n"}, match=("--json",))
    slurm.on("squeue", answer("squeue-array.txt"))
    res = run_module(job_id=job_id, state="query")
    assert (res["job_id"], res["state"]) == (job_id, state)
    assert [c["job_id"] for c in res["components"]] == parts
    assert all(c[c.index("--job") + 1] == "13" for c in slurm.calls if c[0] == "squeue")


def test_array_pending_remainder_counts_as_its_tasks(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-array-pending.txt"))
    res = run_module(job_id="11_[2-3]", state="query")
    assert (res["state"], [c["job_id"] for c in res["components"]]) == ("PENDING", ["11_[1-3]"])


def test_array_ended_in_scontrol(slurm, run_module) -> None:
    no_accounting(slurm)
    slurm.on("squeue", UNKNOWN)
    slurm.on("scontrol", answer("scontrol-array-done.txt"))
    res = run_module(job_id="13_2", state="query")
    assert (res["state"], res["exit_code"], res["source"]) == ("COMPLETED", 0, "scontrol")
    assert [c["job_id"] for c in res["components"]] == ["13_2"]


@pytest.mark.parametrize(("job_id", "parts"), [("16", ["16+0", "16+1"]), ("16+1", ["16+1"])])
def test_heterogeneous_job_and_component(slurm, run_module, job_id, parts) -> None:
    slurm.on("squeue", answer("squeue-all-het.json"), match=("--json",))
    res = run_module(job_id=job_id, state="query")
    assert (res["state"], [c["job_id"] for c in res["components"]]) == ("PENDING", parts)
    assert res["source"] == "squeue --json"


def test_heterogeneous_component_from_text_output(slurm, run_module) -> None:
    # squeue --job 16+1 lists both components; the module keeps the one asked for.
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-het-component.txt"))
    res = run_module(job_id="16+1", state="query")
    assert [c["job_id"] for c in res["components"]] == ["16+1"]


# ---------------------------------------------------------------- timeout


def test_timeout_fails_with_the_state_the_id_and_the_way_on(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-running.txt"))
    res = run_module(job_id="12", state="query", wait=True, timeout=1, **FAST)
    assert res["failed"] and res["timed_out"]
    assert res["state"] == "RUNNING"
    msg = res["msg"]
    assert msg.startswith(
        "job 12 (fsdp-tiny) is still running (RUNNING, elapsed 0:00:02 on vm) after the 1 s"
    )
    assert "Cancel it with `scancel 12`" in msg
    assert "follow it again with trainstack.cluster.slurm_job job_id=12 state=query wait=true" in msg
    assert not any(c[0] == "scancel" for c in slurm.calls)


def test_timeout_of_a_pending_job_gives_its_reason(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-array-pending.txt"))
    res = run_module(job_id="11", state="query", wait=True, timeout=1, **FAST)
    assert res["failed"] and res["timed_out"]
    assert "job 11 (arr) is still pending (PENDING" in res["msg"]
    assert "`scancel 11`" in res["msg"]


def test_until_stops_the_wait_without_failing(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-running.txt"))
    res = run_module(job_id="12", state="query", wait=True, timeout=30, until=["RUNNING"], **FAST)
    assert not res.get("failed") and res["state"] == "RUNNING"


def test_unknown_job_fails_naming_the_sources(slurm, run_module) -> None:
    no_accounting(slurm)
    slurm.on("squeue", UNKNOWN)
    slurm.on("scontrol", answer("scontrol-unknown.err"))
    res = run_module(job_id="999999", state="query")
    assert res["failed"]
    assert res["msg"] == (
        "job 999999 is unknown to squeue, sacct and scontrol (sacct: Slurm accounting storage is disabled)"
    )


# ---------------------------------------------------------------- submit, adopt, cancel


def test_adopts_the_queued_job_of_the_same_name(slurm, run_module) -> None:
    """Without JSON output (an older squeue), the name lookup reads text with the name printed last."""
    slurm.on("squeue", UNKNOWN, match=("--json",))
    # squeue --format '%i|%T|%j' for the running job 12 (the fields of squeue-running.txt, in that order).
    slurm.on("squeue", {"out": "12|RUNNING|fsdp-tiny\n"}, match=("--name", "fsdp-tiny"))
    slurm.on("squeue", answer("squeue-running.txt"))
    res = run_module(name="fsdp-tiny", script="/tmp/job.sbatch")
    assert (res["job_id"], res["submitted"], res["changed"], res["state"]) == ("12", False, False, "RUNNING")
    assert not any(c[0] == "sbatch" for c in slurm.calls)


def test_a_name_holding_the_separator_is_adopted_not_submitted_again(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", {"out": "12|RUNNING|tiny|fsdp\n"}, match=("--name", "tiny|fsdp"))
    slurm.on("squeue", answer("squeue-running.txt"))
    res = run_module(name="tiny|fsdp", script="/tmp/job.sbatch")
    assert (res["job_id"], res["submitted"]) == ("12", False)
    assert not any(c[0] == "sbatch" for c in slurm.calls)


def test_adopting_a_queued_array_returns_its_base_id(slurm, run_module) -> None:
    """squeue --json (22.05 lists every job whatever the filter): the array's tasks are found by name."""
    slurm.on("squeue", answer("squeue-all-array.json"))
    res = run_module(name="arr", script="/tmp/job.sbatch")
    assert (res["job_id"], res["submitted"]) == ("13", False)
    assert ["squeue", "--json", "--name", "arr"] in slurm.calls


def test_json_name_lookup_takes_only_live_jobs_of_exactly_that_name(slurm, run_module) -> None:
    """Jobs 10 and 12 of the name have ended and jobs of other names run: a new job is submitted."""
    no_accounting(slurm)
    slurm.on("sbatch", {"out": "20\n"})
    slurm.on("squeue", answer("squeue-all-array.json"))
    slurm.on("scontrol", answer("scontrol-unknown.err"))
    res = run_module(name="fsdp-tiny", script="/tmp/job.sbatch")
    assert res["submitted"] and res["job_id"] == "20", res
    assert [c for c in slurm.calls if c[0] == "sbatch"] == [
        ["sbatch", "--parsable", "--job-name=fsdp-tiny", "/tmp/job.sbatch"]
    ]


def test_submits_when_none_is_queued_and_follows_the_new_id(slurm, run_module) -> None:
    no_accounting(slurm)
    slurm.on("squeue", {"out": ""}, match=("--name",))
    slurm.on("sbatch", {"out": "12\n"})
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-running.txt"), answer("squeue-failed.txt"))
    slurm.on("scontrol", answer("scontrol-failed.txt"))
    res = run_module(name="fsdp-tiny", script="/tmp/job.sbatch", wait=True, timeout=30, **FAST)
    assert (res["job_id"], res["submitted"], res["changed"], res["state"]) == ("12", True, True, "FAILED")
    assert ["sbatch", "--parsable", "--job-name=fsdp-tiny", "/tmp/job.sbatch"] in slurm.calls


def test_script_content_is_written_into_a_new_run_directory_first(slurm, run_module, tmp_path) -> None:
    """One module run writes the script (its directory made) and submits it: sbatch finds the file whole."""
    no_accounting(slurm)
    slurm.on("squeue", {"out": ""}, match=("--name",))
    slurm.on("sbatch", {"out": "12\n"})
    slurm.on("squeue", answer("squeue-running.txt"))
    script = tmp_path / "runs" / "tiny-1" / "job.sbatch"
    res = run_module(name="fsdp-tiny", script=str(script), script_content="#!/bin/bash\necho 'a b'\n")
    assert (res["job_id"], res["submitted"]) == ("12", True), res
    assert script.read_text() == "#!/bin/bash\necho 'a b'\n"
    assert oct(script.stat().st_mode & 0o777) == "0o755"
    assert oct(script.parent.stat().st_mode & 0o777) == "0o755"
    assert ["sbatch", "--parsable", "--job-name=fsdp-tiny", str(script)] in slurm.calls
    assert [p.name for p in script.parent.iterdir()] == ["job.sbatch"]


def test_an_adopted_job_gets_no_new_script(slurm, run_module, tmp_path) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", {"out": "12|RUNNING|fsdp-tiny\n"}, match=("--name", "fsdp-tiny"))
    slurm.on("squeue", answer("squeue-running.txt"))
    script = tmp_path / "runs" / "tiny-2" / "job.sbatch"
    res = run_module(name="fsdp-tiny", script=str(script), script_content="#!/bin/bash\n")
    assert (res["job_id"], res["submitted"]) == ("12", False)
    assert not script.parent.exists()


def test_a_script_that_cannot_be_written_is_not_submitted(slurm, run_module, tmp_path) -> None:
    slurm.on("squeue", {"out": ""}, match=("--name",))
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the run directory would go")
    res = run_module(name="fsdp-tiny", script=str(blocker / "tiny" / "job.sbatch"), script_content="x\n")
    assert res["failed"] and "could not write the batch script" in res["msg"], res
    assert "Nothing was submitted" in res["msg"]
    assert not any(c[0] == "sbatch" for c in slurm.calls)


def test_query_by_name_without_accounting_finds_the_ended_job(slurm, run_module) -> None:
    no_accounting(slurm)
    slurm.on("squeue", {"out": ""}, match=("--name", "--format %i|"))
    slurm.on("squeue", {"out": "12\n"}, match=("--name", "--format=%i"))
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-failed.txt"))
    slurm.on("scontrol", answer("scontrol-failed.txt"))
    res = run_module(name="fsdp-tiny", state="query")
    assert (res["job_id"], res["state"], res["exit_code"]) == ("12", "FAILED", 3)


def test_cancel_by_id(slurm, run_module) -> None:
    slurm.on("squeue", UNKNOWN, match=("--json",))
    slurm.on("squeue", answer("squeue-running.txt"))
    slurm.on("scancel", {"out": ""})
    res = run_module(job_id="12", state="absent")
    assert (res["changed"], res["cancelled"]) == (True, ["12"])
    assert ["scancel", "12"] in slurm.calls
