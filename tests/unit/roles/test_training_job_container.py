"""training_job with a container image: the rendered batch script imports the image once per manifest
digest into the shared cache and pyxis starts that squashfs file; the PyTorchJob runs the image pinned to its
digest; the image checks refuse, naming the key, an image without a stack record or one the host's driver is
too old for.

The batch script runs under bash with a real flock and named stand-ins (no Slurm, enroot or pyxis here):
`enroot` records each import and writes the output file after a pause (so two jobs overlap), `srun` records
its arguments. Two jobs started together and a third afterwards import the image exactly once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import CURRENT_STACK_ID

from .test_training_job_inputs import failed
from .test_training_job_scripts import SCONTROL_STANDIN, executable, render

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"10.77.0.1:8673/lab/trainstack/pytorch:{CURRENT_STACK_ID}-0123456789ab"
PINNED = f"10.77.0.1:8673/lab/trainstack/pytorch@{DIGEST}"
ENROOT_STANDIN = """#!/bin/bash
# STAND-IN for enroot import: records the call, then writes the --output file after a pause.
echo "ENROOT_ALLOW_HTTP=${ENROOT_ALLOW_HTTP-unset} $*" >> "$TS_IMPORTS"
if [[ -n ${ENROOT_CONFIG_PATH-} ]]; then
  stat -c '%a' "$ENROOT_CONFIG_PATH" "$ENROOT_CONFIG_PATH/.credentials" >> "$TS_IMPORTS"
  cat "$ENROOT_CONFIG_PATH/.credentials" >> "$TS_IMPORTS"
fi
[[ $1 == import && $2 == --output ]] || exit 2
sleep 1
echo squashfs > "$3"
"""
SRUN_RECORDER = """#!/bin/bash
# STAND-IN for Slurm's srun: records its arguments and the enroot settings the job may pass its steps.
printf '%s\\n' "ENROOT_ALLOW_HTTP=${ENROOT_ALLOW_HTTP-unset}" \\
  "ENROOT_CONFIG_PATH=${ENROOT_CONFIG_PATH-unset}" "$@" > "$TS_SRUN"
"""


def image_info(**overrides: Any) -> dict[str, Any]:
    """What container_image_info returns for a checked image."""
    return {
        "digest": DIGEST,
        "pinned": PINNED,
        "record": {"stack": CURRENT_STACK_ID, "components": {}},
        "image_cuda": {},
        "host_driver": None,
        "host_driver_source": "none",
        "problems": [],
        **overrides,
    }


def container_request(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "training_job_shared_dir": str(tmp_path / "shared"),
        "training_job_container_image": IMAGE,
        "training_job_container_allow_http": True,
        "__training_job_image_info": image_info(),
        **overrides,
    }


def run_job(script: Path, tmp_path: Path, name: str, enroot: str = ENROOT_STANDIN) -> subprocess.Popen:
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "enroot", enroot)
    executable(bin_dir / "srun", SRUN_RECORDER)
    executable(bin_dir / "scontrol", SCONTROL_STANDIN)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TS_IMPORTS": str(tmp_path / "imports.log"),
        "TS_SRUN": str(tmp_path / f"srun-{name}.txt"),
        "SLURM_JOB_ID": name,
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
    }
    return subprocess.Popen(
        ["bash", str(script)],
        env=env,
        cwd=script.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_image_is_imported_once_and_pyxis_starts_the_file(tmp_path: Path) -> None:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir()
    script.write_text(render("job.sbatch.j2", tmp_path, **container_request(tmp_path)))
    subprocess.run(["bash", "-n", str(script)], check=True)
    sqsh = tmp_path / "shared" / "trainstack" / "containers" / f"sha256-{'ab' * 32}.sqsh"

    jobs = [run_job(script, tmp_path, name) for name in ("1", "2")]
    for job in jobs:
        _out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err
    later = run_job(script, tmp_path, "3")
    assert later.communicate(timeout=60) and later.returncode == 0

    imports = (tmp_path / "imports.log").read_text().splitlines()
    # Plain HTTP for the import alone: pyxis starts a file, and no step of the job gets the setting.
    partial = sqsh.with_name(sqsh.stem + ".partial.sqsh")
    assert imports == [f"ENROOT_ALLOW_HTTP=1 import --output {partial} docker://{PINNED}"]
    assert sqsh.read_text() == "squashfs\n"
    assert not sqsh.with_name(sqsh.stem + ".partial.sqsh").exists()
    for name in ("1", "2", "3"):
        args = (tmp_path / f"srun-{name}.txt").read_text().splitlines()
        assert f"--container-image={sqsh}" in args
        assert f"--container-mounts={tmp_path / 'shared'}:{tmp_path / 'shared'}" in args
        assert f"--container-workdir={script.parent}" in args
        assert args[0] == "ENROOT_ALLOW_HTTP=unset"
    assert "export ENROOT_ALLOW_HTTP" not in script.read_text()


def test_without_a_digest_the_steps_get_plain_http_for_pyxis_import(tmp_path: Path) -> None:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir()
    script.write_text(
        render("job.sbatch.j2", tmp_path, **container_request(tmp_path, __training_job_image_info={}))
    )
    job = run_job(script, tmp_path, "1")
    assert job.communicate(timeout=60) and job.returncode == 0
    args = (tmp_path / "srun-1.txt").read_text().splitlines()
    assert args[0] == "ENROOT_ALLOW_HTTP=1" and f"--container-image={IMAGE}" in args
    assert not (tmp_path / "imports.log").exists()


def test_an_ecr_image_is_imported_with_a_token_the_node_asks_for(tmp_path: Path) -> None:
    """The import's own enroot configuration names the registry and a password command, which enroot runs
    when it reads the file; no secret is written, and no step of the job sees that configuration."""
    registry = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
    info = image_info(
        pinned=f"{registry}/ml/pytorch@{DIGEST}",
        reference={"registry": registry, "repository": "ml/pytorch", "tag": CURRENT_STACK_ID, "digest": None},
    )
    request = container_request(
        tmp_path,
        training_job_container_image=f"{registry}/ml/pytorch:{CURRENT_STACK_ID}",
        training_job_container_allow_http=False,
        __training_job_image_info=info,
    )
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir()
    script.write_text(render("job.sbatch.j2", tmp_path, **request))
    job = run_job(script, tmp_path, "1")
    assert job.communicate(timeout=60) and job.returncode == 0
    imports = (tmp_path / "imports.log").read_text().splitlines()
    assert imports[1:] == [
        "700",
        "600",
        f"machine {registry} login AWS password $(aws ecr get-login-password --region eu-west-1)",
    ]
    assert (tmp_path / "srun-1.txt").read_text().splitlines()[1] == "ENROOT_CONFIG_PATH=unset"
    # Another registry gets no credentials file.
    other = tmp_path / "other"
    other.mkdir()
    text = render("job.sbatch.j2", other, **container_request(other))
    assert ".credentials" not in text and "ecr get-login-password" not in text


def test_a_failed_import_leaves_no_file_and_fails_the_job(tmp_path: Path) -> None:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir()
    script.write_text(render("job.sbatch.j2", tmp_path, **container_request(tmp_path)))
    halfway = '#!/bin/bash\n# STAND-IN for enroot import: fails halfway through.\necho x > "$3"\nexit 1\n'
    job = run_job(script, tmp_path, "1", enroot=halfway)
    job.communicate(timeout=60)
    assert job.returncode != 0
    assert list((tmp_path / "shared" / "trainstack" / "containers").glob("*.sqsh")) == []
    assert not (tmp_path / "srun-1.txt").exists()


def test_without_a_digest_pyxis_imports_the_reference_itself(tmp_path: Path) -> None:
    text = render(
        "job.sbatch.j2",
        tmp_path,
        **container_request(tmp_path, __training_job_image_info={}, training_job_container_allow_http=False),
    )
    assert "enroot import" not in text and "ENROOT_ALLOW_HTTP" not in text
    assert f"--container-image={IMAGE}" in text


def test_no_image_no_container_options(tmp_path: Path) -> None:
    text = render("job.sbatch.j2", tmp_path, training_job_shared_dir=str(tmp_path))
    assert "--container" not in text and "enroot" not in text


def test_the_pytorchjob_runs_the_image_pinned_to_its_digest(tmp_path: Path) -> None:
    def image_of(**overrides: Any) -> str:
        text = render(
            "pytorchjob.yaml.j2",
            tmp_path,
            training_job_launcher="kubernetes",
            training_job_nodes=2,
            **overrides,
        )
        specs = yaml.safe_load(text)["spec"]["pytorchReplicaSpecs"]
        images = {role: spec["template"]["spec"]["containers"][0]["image"] for role, spec in specs.items()}
        assert len(set(images.values())) == 1, images
        return images["Master"]

    assert image_of(**container_request(tmp_path)) == PINNED
    assert (
        image_of(**container_request(tmp_path, training_job_k8s_image="other.example/img:2"))
        == "other.example/img:2"
    )
    assert image_of(**container_request(tmp_path, __training_job_image_info={})) == IMAGE
    assert failed("input", training_job_launcher="kubernetes", training_job_container_image=IMAGE) == []


def image_failures(**overrides: Any) -> list[str]:
    return failed("image", **container_request(Path("/tmp"), **overrides))


def test_an_image_without_a_stack_record_is_refused_naming_the_key() -> None:
    (message,) = image_failures(__training_job_image_info=image_info(record=None))
    assert message.startswith(f"training_job_container_image {IMAGE} carries no stack record")
    assert "training_job_container_unchecked=true" in message
    assert image_failures() == []


def test_a_driver_too_old_names_both_versions_and_the_rule() -> None:
    problem = {
        "rule": "cuda-driver-minimum",
        "message": "nvidia_driver 570.86.10 is too old for cuda.version 13.2.51: needs >= 580.65.06",
        "citation": "https://docs.nvidia.com/deploy/cuda-compatibility/",
    }
    info = image_info(
        host_driver="570.86.10", host_driver_source="/etc/trainstack/image.json", problems=[problem]
    )
    (message,) = image_failures(__training_job_image_info=info)
    assert "needs a newer NVIDIA driver than the host's 570.86.10 (/etc/trainstack/image.json)" in message
    assert "cuda.version 13.2.51: needs >= 580.65.06 (rule cuda-driver-minimum" in message


def test_a_cuda_image_on_gpus_needs_a_known_driver() -> None:
    info = image_info(image_cuda={"cuda": {"version": "13.2"}})
    (message,) = image_failures(__training_job_image_info=info, training_job_instance_type="p5.48xlarge")
    assert "holds CUDA" in message and "names no NVIDIA driver" in message
    assert image_failures(__training_job_image_info=info) == []  # no GPUs asked for: CPU use of a CUDA image
