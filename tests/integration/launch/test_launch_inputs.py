"""launch_training's checks and its local launcher, run as users run the playbook, against the controller
(`-i localhost,`, no Slurm needed): bad input fails naming the variable and the one rule it broke, before
anything is staged; an inventory without a launch host fails instead of running nowhere; --check changes
nothing; values reach the training process literally.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.image.oci_push import RECORD_ANNOTATION, Registry, record, running_registry
from tests.support import VENV_BIN, playbook

HERE = Path(__file__).resolve().parent
LOCAL = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}"]


def launch(tmp_path: Path, *extra: str, inventory: list[str] | None = None) -> subprocess.CompletedProcess:
    """launch_training on this machine, its shared and results directories under tmp_path."""
    return playbook(
        "launch_training",
        *(LOCAL if inventory is None else inventory),
        "-e",
        f"training_job_shared_dir={tmp_path / 'shared'}",
        "-e",
        f"training_job_results_dir={tmp_path / 'results'}",
        *extra,
        check=False,
        timeout=900,
    )


def error(proc: subprocess.CompletedProcess) -> str:
    """The one-line reason of a failed run (Ansible's [ERROR] line)."""
    assert proc.returncode != 0, proc.stdout[-3000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("[ERROR]")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return lines[0]


def nothing_written(tmp_path: Path) -> bool:
    return not (tmp_path / "shared").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            [
                "-e",
                "training_job_testcase=pytorch/ddp",
                "-e",
                "training_job_nodez=2",
                "-e",
                "training_job_lancher=local",
            ],
            "Unknown variable(s): training_job_lancher (close: training_job_launcher); "
            "training_job_nodez (close: training_job_nodes, training_job_node_os, training_job_nodelist).",
        ),
        (
            ["-e", "training_job_testcase=pytorch/no-such-case"],
            "Unknown test case 'pytorch/no-such-case'. "
            "Known: data/prepare, deepspeed/zero3, hf/finetune, jax/llama, megatron/gpt, nccl/collectives, "
            "pytorch/ddp, pytorch/fsdp, torchtitan/llama.",
        ),
        (
            ["-e", "training_job_testcase=../../etc"],
            "Unknown test case '../../etc'. "
            "Known: data/prepare, deepspeed/zero3, hf/finetune, jax/llama, megatron/gpt, nccl/collectives, "
            "pytorch/ddp, pytorch/fsdp, torchtitan/llama.",
        ),
        (
            ["-e", "training_job_testcase=pytorch/ddp", "-e", "training_job_name=.."],
            "Action failed: training_job_name '..' must be a plain name",
        ),
        (
            ["-e", "training_job_testcase=pytorch/ddp", "-e", "training_job_shared_dir=/"],
            "Action failed: training_job_shared_dir '/' must be an absolute path other than '/'",
        ),
        (
            ["-e", "training_job_testcase=pytorch/ddp", "-e", '{"training_job_env": {"A B": "1"}}'],
            "Action failed: training_job_env has key(s) that are not environment variable names",
        ),
        (
            ["-e", "training_job_testcase=pytorch/ddp", "-e", '{"training_job_args": {"batch_size": 1}}'],
            "Action failed: training_job_args key(s) ['batch_size'] are not option names",
        ),
        (
            [
                "-e",
                "training_job_testcase=pytorch/ddp",
                "-e",
                "training_job_launcher=local",
                "-e",
                "training_job_nodes=2",
            ],
            "Cannot launch pytorch/ddp: The local launcher runs on one node (training_job_nodes=2).",
        ),
    ],
    ids=[
        "unknown-variable",
        "unknown-testcase",
        "testcase-path",
        "name-dotdot",
        "shared-root",
        "env-key",
        "arg-key",
        "local-nodes",
    ],
)
def test_bad_input_names_its_rule_and_stages_nothing(tmp_path: Path, extra: list[str], expected: str) -> None:
    proc = launch(tmp_path, "-e", "launch_host=localhost", *extra)
    message = error(proc)
    assert expected in message
    # Only the rule that failed is named.
    assert "must be >= 1" not in message and "instance type" not in message
    assert nothing_written(tmp_path)


def test_an_inventory_without_a_head_host_fails(tmp_path: Path) -> None:
    proc = launch(tmp_path, "-e", "training_job_testcase=pytorch/ddp", inventory=["-i", "localhost,"])
    assert "The inventory has no head host (group head or role_head)" in error(proc)
    proc = launch(
        tmp_path,
        "-e",
        "training_job_testcase=pytorch/ddp",
        "-e",
        "launch_host=nohost",
        inventory=["-i", "localhost,"],
    )
    assert "launch_host nohost is not a host or group of the inventory" in error(proc)
    assert nothing_written(tmp_path)


def test_several_role_head_hosts_need_a_choice(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[role_head]\nhead-a\nhead-b\n")
    proc = launch(tmp_path, "-e", "training_job_testcase=pytorch/ddp", inventory=["-i", str(inventory)])
    assert "The inventory has 2 head hosts (head-a, head-b), one is needed" in error(proc)


def local_request(tmp_path: Path) -> list[str]:
    return [
        "-e",
        "training_job_testcase=pytorch/ddp",
        "-e",
        "training_job_launcher=local",
        "-e",
        "training_job_venv=false",
        "-e",
        f"training_job_python={VENV_BIN / 'python'}",
    ]


def test_role_head_is_the_launch_host_and_check_mode_changes_nothing(tmp_path: Path) -> None:
    """The ec2_cluster inventory's role_head group names the launch host; --check on it writes nothing."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"[role_head]\nhead-a ansible_connection=local ansible_python_interpreter={VENV_BIN / 'python'}\n"
    )
    proc = launch(tmp_path, *local_request(tmp_path), "--check", inventory=["-i", str(inventory)])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok: [head-a]" in proc.stdout
    assert "Check mode: pytorch/ddp passed every check" in proc.stdout
    assert nothing_written(tmp_path)


def test_local_launch_hands_values_to_the_process_literally(tmp_path: Path) -> None:
    """A real local launch of pytorch/ddp; the rank process starts under a recording nsys stand-in."""
    odd = (
        f"a  b \"dq\" 's' $(touch {tmp_path}/pwned) `touch {tmp_path}/pwned` $HOME $(HOME) $$ "
        "${local_rank} key: v #c ; | &"
    )
    request = [
        "-e",
        "launch_host=localhost",
        *local_request(tmp_path),
        "-e",
        json.dumps(
            {
                "training_job_env": {"TS_ODD": odd, "TS_EMPTY": ""},
                "training_job_args": {"steps": 3, "checkpoint-dir": odd},
                "training_job_nsys_ranks": [0],
                "training_job_nsys_bin": str(HERE / "standin_nsys_env.py"),
            }
        ),
    ]
    checked = launch(tmp_path, *request, "--check")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert nothing_written(tmp_path)

    proc = launch(tmp_path, *request)
    assert proc.returncode == 0, proc.stdout[-4000:]
    (report,) = (tmp_path / "results").glob("*/nsys/rank0.nsys-rep")
    seen = json.loads(report.read_text())
    assert seen["env"]["TS_ODD"] == odd
    assert seen["env"]["TS_EMPTY"] == ""
    command = seen["command"]
    assert command[command.index("--checkpoint-dir") + 1] == odd
    assert command[command.index("--steps") + 1] == "3"
    assert not (tmp_path / "pwned").exists()
    summary = json.loads((report.parent.parent / "summary.json").read_text())
    assert summary["steps"] == 3

    again = launch(tmp_path, *request, "--check")
    assert again.returncode == 0, again.stdout[-3000:]

    # An argument the entrypoint lacks is named with the options it resembles, before anything runs.
    misspelt = launch(tmp_path, *local_request(tmp_path), "-e", '{"training_job_args": {"stepz": 3}}')
    assert "pytorch/ddp has no option(s) ['--stepz']: stepz (close: steps)" in error(misspelt)
    assert len(list((tmp_path / "results").iterdir())) == 1


def test_a_cluster_name_picks_that_clusters_head(tmp_path: Path) -> None:
    """Two clusters as the ec2_cluster inventory groups them: -e cluster=<name> picks the head; without it, or
    with a name no cluster has, the play stops and names the clusters it knows."""
    local = f"ansible_connection=local ansible_python_interpreter={VENV_BIN / 'python'}"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"[cluster_train_a_head]\nhead-a {local}\n[cluster_train_b_head]\nhead-b {local}\n"
        "[role_head:children]\ncluster_train_a_head\ncluster_train_b_head\n"
    )
    hosts = ["-i", str(inventory)]
    proc = launch(tmp_path, *local_request(tmp_path), "-e", "cluster=train-b", "--check", inventory=hosts)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok: [head-b]" in proc.stdout and "head-a" not in proc.stdout.split("PLAY [Launch")[1]
    assert "pick one with -e cluster=<name> (clusters: train_a, train_b)" in error(
        launch(tmp_path, *local_request(tmp_path), inventory=hosts)
    )
    assert (
        "cluster=train-c: no group cluster_train_c_head in the inventory (clusters: train_a, train_b)"
        in error(launch(tmp_path, *local_request(tmp_path), "-e", "cluster=train-c", inventory=hosts))
    )
    assert nothing_written(tmp_path)


@pytest.mark.slow
def test_a_test_cases_own_rules_refuse_its_arguments_before_submission(tmp_path: Path) -> None:
    """torchtitan/llama names validate_option: the role runs its rules with the job's world size (2 processes
    here) on the submit host and stops with the rule; its included package was staged beside it."""
    request = [
        "-e",
        "launch_host=localhost",
        "-e",
        "training_job_testcase=torchtitan/llama",
        "-e",
        "training_job_launcher=local",
        "-e",
        "training_job_venv=false",
        "-e",
        f"training_job_python={VENV_BIN / 'python'}",
        "-e",
        "training_job_procs_per_node=2",
        "-e",
        '{"training_job_args": {"tp": 3}}',
    ]
    proc = launch(tmp_path, *request)
    assert (
        "torchtitan/llama refuses these arguments for 2 process(es) (1 node(s) x 2): "
        "--tp 3 must divide tiny's attention heads (n_heads 4, n_kv_heads 2)"
    ) in error(proc)
    assert "Nothing was submitted." in error(proc)
    staged = tmp_path / "shared" / "trainstack"
    assert (staged / "testcases" / "torchtitan" / "llama" / "trainstack_train" / "metrics.py").is_file()
    assert not list((staged / "runs").iterdir()) and not (tmp_path / "results").exists()


@pytest.fixture(scope="module")
def image_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A real registry holding: an image built for CUDA 13.2 (its stack record as the annotation), a CPU image
    (record without CUDA) and an image without a record."""
    with running_registry(tmp_path_factory.mktemp("registry")) as registry:
        registry.image("lab/trainstack/pytorch", "cuda13", {RECORD_ANNOTATION: json.dumps(record("13.2"))})
        registry.image("lab/trainstack/pytorch", "cpu", {RECORD_ANNOTATION: json.dumps(record())})
        registry.image("other/plain", "1", {"org.opencontainers.image.title": "plain"})
        yield registry


def host_record(tmp_path: Path, driver: str) -> str:
    """This host's stack record as an AMI's image_manifest writes it, naming its NVIDIA driver."""
    path = tmp_path / "host-image.json"
    path.write_text(json.dumps({"components": {"nvidia_driver": {"pinned": driver, "installed": driver}}}))
    return str(path)


def container_launch(tmp_path: Path, image: str, *extra: str) -> subprocess.CompletedProcess:
    return launch(
        tmp_path,
        "-e",
        "launch_host=localhost",
        *local_request(tmp_path),
        "-e",
        f"training_job_container_image={image}",
        "-e",
        "training_job_container_allow_http=true",
        *extra,
        "--check",
    )


def test_a_container_image_is_checked_against_the_hosts_driver_before_submission(
    tmp_path: Path, image_registry: Registry
) -> None:
    """From the registry, before anything is staged: CUDA 13.2 against a 570 driver is refused with both
    versions and the matrix's rule; a tag the registry lacks is its 404 even with the override; an image
    without a record passes only with the explicit override, which says what it skipped."""
    cuda13 = f"{image_registry.host}/lab/trainstack/pytorch:cuda13"
    old = container_launch(
        tmp_path, cuda13, "-e", f"__training_job_host_record={host_record(tmp_path, '570.86.10')}"
    )
    message = error(old)
    assert (
        f"training_job_container_image {cuda13} needs a newer NVIDIA driver than the host's 570.86.10"
        in message
    )
    assert "nvidia_driver 570.86.10 is too old for cuda.version 13.2.51: needs >= 580.65.06" in message
    assert "(rule cuda-driver-minimum of the version matrix" in message

    missing = f"{image_registry.host}/lab/trainstack/pytorch:no-such-tag"
    message = error(container_launch(tmp_path, missing, "-e", "training_job_container_unchecked=true"))
    assert (
        f"training_job_container_image {missing}: registry {image_registry.host} has no manifest" in message
    )
    assert "(404 from" in message
    assert nothing_written(tmp_path)

    plain = f"{image_registry.host}/other/plain:1"
    unchecked = container_launch(tmp_path, plain, "-e", "training_job_container_unchecked=true")
    assert unchecked.returncode == 0, unchecked.stdout[-3000:]
    assert f"launching {plain} without training_job_container_image {plain} carries no stack record" in (
        " ".join(unchecked.stdout.split())
    )


@pytest.mark.slow
def test_a_matching_driver_passes_and_a_missing_record_needs_the_override(
    tmp_path: Path, image_registry: Registry
) -> None:
    cuda13 = f"{image_registry.host}/lab/trainstack/pytorch:cuda13"
    new = container_launch(
        tmp_path, cuda13, "-e", f"__training_job_host_record={host_record(tmp_path, '595.91.07')}"
    )
    assert new.returncode == 0, new.stdout[-3000:]
    assert "Check mode: pytorch/ddp passed every check" in new.stdout
    plain = f"{image_registry.host}/other/plain:1"
    assert f"training_job_container_image {plain} carries no stack record" in error(
        container_launch(tmp_path, plain)
    )
    assert nothing_written(tmp_path)
