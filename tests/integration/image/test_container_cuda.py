"""The CUDA container images built for real (playbooks/build_container.yml): pytorch-cuda on base and the test
case image cuda-pytorch-fsdp on it, with buildah from the local image's Debian 12 root filesystem.

What each layer holds is real: CUDA 13.2 to build against from NVIDIA's PyPI wheels, EFA's user space from the
efa role with a container's installer switches, aws-ofi-nccl against its /opt/amazon/efa and nccl-tests,
compiled from their release sources (served by scripts/fabric_mirror.py from the upstream directory, checked
against the stack's lock) against the base layer's NCCL, torch's CUDA build and its nvidia-* wheels from PyPI
(the stack's sha256 and lock), the test case environment from its gpu-debian-12-x86_64 lock. The EFA installer
is the mirror's stand-in (AWS's cannot be downloaded here; checked against the mirror's lock): Debian's
rdma-core, libfabric 1.17 and Open MPI in the real installer's layout. libfabric 1.17 is below the 1.22 that
--enable-platform-aws needs, so the build's flavour table turns the AWS platform off for pytorch-cuda (stack
rule aws-ofi-nccl-libfabric), as the lab's fabric scenario does. There is no GPU here: torch's CUDA line is
read, not run. nccl-tests is compiled for sm_90 only, to keep the compile short; the flavour's default is the
instance catalog's architectures.

Slow (marked `slow`): torch's CUDA wheels are gigabytes unpacked into two layers. A machine that already built
these keys reuses them (the layers are keyed by their inputs); bench/container_layers.py reports the sizes."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from scripts import fabric_mirror
from tests.support import CURRENT_STACK_ID, REPO, ansible_env, run

pytestmark = [pytest.mark.slow]

STACK = yaml.safe_load((REPO / "stacks" / f"{CURRENT_STACK_ID}.yml").read_text())
CHAIN = ["base", "pytorch-cuda", "cuda-pytorch-fsdp"]


def lab_flavours() -> dict:
    """The playbook's flavour table with pytorch-cuda's aws-ofi-nccl off the AWS platform (the stand-in EFA
    installer's libfabric 1.17; the real installer's passes). Handed in as the table, the change is part of
    the layer's key like any variable of a flavour."""
    play = yaml.safe_load((REPO / "playbooks" / "build_container.yml").read_text())[0]
    table = play["vars"]["container_image_flavours"]
    table["pytorch-cuda"]["vars"] = {**table["pytorch-cuda"]["vars"], "aws_ofi_nccl_platform_aws": False}
    return table


def buildah(*args: str) -> str:
    """buildah with a standard input of its own: `buildah run` leaves the stdin it is given non-blocking, and
    the ansible-playbook runs later in this process would refuse to start on a shared one."""
    return subprocess.run(
        ["buildah", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True
    ).stdout


# A fixed address: the mirror's URL is one of the CUDA layers' key inputs, so a second run reuses the layers.
MIRROR_PORT = 8675


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The release sources and the EFA installer's stand-in on this machine's loopback (the build shares the
    host's network), and the mirror's lock (the stand-in's sha256)."""
    if not fabric_mirror.default_upstream().is_dir():
        pytest.skip(f"no release sources at {fabric_mirror.default_upstream()}")
    directory = tmp_path_factory.mktemp("sources")
    port = MIRROR_PORT
    if not port_free(port):
        pytest.fail(f"127.0.0.1:{port}, where the release sources are served, is taken")
    subprocess.run(
        [
            "python3",
            "scripts/fabric_mirror.py",
            "up",
            "--dir",
            str(directory),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", str(directory / "lock.json")
    finally:
        subprocess.run(
            ["python3", "scripts/fabric_mirror.py", "down", "--dir", str(directory)], cwd=REPO, check=False
        )


@pytest.fixture(scope="module")
def builds(sources: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("records")
    mirror, lock = sources
    extra = {
        "container_flavours": ["cuda-pytorch-fsdp"],
        "container_cuda_archs": ["sm_90"],
        "container_image_flavours": lab_flavours(),
    }
    proc = run(
        [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "playbooks/build_container.yml",
            "-e",
            f"trainstack_stack={CURRENT_STACK_ID}",
            "-e",
            f"container_source_mirror_url={mirror}",
            "-e",
            f"container_source_mirror_lock={lock}",
            "-e",
            f"container_build_dir={out}",
            "-e",
            "container_host_ca_certs=true",
            "-e",
            json.dumps(extra),
        ],
        env=ansible_env(BUILDAH_ISOLATION="chroot"),
        timeout=5400,
    )
    records = {f: json.loads((out / f"{f}.json").read_text()) for f in CHAIN}
    return {"records": records, "output": proc.stdout}


def in_image(image: str, *argv: str) -> str:
    """A command run in the image (buildah run, chroot isolation: it shares the host's network, the only one
    chroot isolation allows)."""
    container = buildah("from", "--pull=never", image).strip()
    try:
        return buildah("run", "--isolation", "chroot", container, "--", *argv).strip()
    finally:
        buildah("rm", container)


def label_record(image: str) -> dict:
    config = json.loads(buildah("inspect", "--type", "image", image))
    return json.loads(config["OCIv1"]["config"]["Labels"]["org.trainstack.image.json"])


def test_torch_in_pytorch_cuda_is_the_stacks_cuda_line(builds: dict) -> None:
    image = builds["records"]["pytorch-cuda"]["image"]
    script = "import torch; print(torch.__version__); print(torch.version.cuda)"
    version, cuda = in_image(image, "/opt/trainstack/venv/bin/python", "-c", script).splitlines()[-2:]
    assert cuda == STACK["components"]["pytorch"]["cuda_runtime"]
    assert version.split("+")[0] == STACK["components"]["pytorch"]["version"] and "+cpu" not in version


def test_nccl_tests_and_the_aws_ofi_nccl_plugin_are_in_the_image(builds: dict) -> None:
    image = builds["records"]["pytorch-cuda"]["image"]
    listing = in_image(image, "sh", "-c", "ls /opt/nccl-tests/bin /opt/aws-ofi-nccl/lib")
    assert {"all_reduce_perf", "all_gather_perf", "alltoall_perf"} <= set(listing.split())
    assert "libnccl-net.so" in listing.split() or any(n.startswith("libnccl-net") for n in listing.split())
    # The plugin resolves every library it links inside the image.
    ldd = in_image(image, "sh", "-c", "ldd /opt/aws-ofi-nccl/lib/libnccl-net*.so")
    assert "not found" not in ldd and "libfabric.so.1 =>" in ldd
    nccl_tests = in_image(image, "sh", "-c", "ldd /opt/nccl-tests/bin/all_reduce_perf")
    assert "not found" not in nccl_tests.replace("libcuda.so.1 => not found", "")


def test_the_plugin_is_built_against_the_efa_installers_libfabric(builds: dict) -> None:
    """One path with the AMIs: the efa role installs EFA's user space with a container's switches and
    aws-ofi-nccl is configured with, and loads, the libfabric of /opt/amazon/efa."""
    image = builds["records"]["pytorch-cuda"]["image"]
    installed = in_image(image, "cat", "/opt/amazon/efa_installed_packages")
    assert f"# EFA installer version: {STACK['components']['efa_installer']['version']}\n" in installed
    # --skip-kmod (the host's kernel), --skip-limit-conf (the runtime's memlock), --no-verify (no device).
    assert "skip_kmod=1 skip_limit_conf=1 verify=0" in installed
    stamp = in_image(image, "head", "-n1", "/opt/aws-ofi-nccl/.trainstack-build")
    assert "--with-libfabric=/opt/amazon/efa" in stamp.split(), stamp
    ldd = in_image(image, "sh", "-c", "ldd /opt/aws-ofi-nccl/lib/libnccl-net-ofi.so")
    assert "libfabric.so.1 => /opt/amazon/efa/lib/libfabric.so.1" in ldd, ldd
    # The installer and its unpacked tree stay in the host's cache (bind-mounted), out of the layer (the
    # role's default work directory would have put them in it).
    assert in_image(image, "ls", "-A", "/var/cache/trainstack/builds") == ""
    assert in_image(image, "sh", "-c", "test -e /var/cache/trainstack/efa || echo absent") == "absent"


def test_the_stack_record_names_every_layer(builds: dict) -> None:
    records = builds["records"]
    for depth, flavour in enumerate(CHAIN[1:], start=2):
        record = label_record(records[flavour]["image"])
        assert [layer["flavour"] for layer in record["layers"]] == CHAIN[:depth]
        assert [layer["key"] for layer in record["layers"]] == [records[f]["key"] for f in CHAIN[:depth]]
        assert record["stack"] == CURRENT_STACK_ID
    record = label_record(records["pytorch-cuda"]["image"])
    components = record["components"]
    for name in ("cuda", "nccl", "efa_installer", "aws_ofi_nccl", "nccl_tests", "pytorch"):
        assert components[name]["installed"], name
    assert components["cuda"]["installed"] == STACK["components"]["cuda"]["version"]
    assert components["nccl"]["installed"] == STACK["components"]["nccl"]["version"]


def test_the_fsdp_image_bakes_its_gpu_lock_on_pytorch_cudas_layers(builds: dict) -> None:
    records = builds["records"]
    fsdp = records["cuda-pytorch-fsdp"]
    assert fsdp["parent"] == records["pytorch-cuda"]["image"]
    diff_ids = {
        f: json.loads(buildah("inspect", "--type", "image", records[f]["image"]))["OCIv1"]["rootfs"][
            "diff_ids"
        ]
        for f in CHAIN
    }
    for parent, child in itertools.pairwise(CHAIN):
        assert diff_ids[child][:-1] == diff_ids[parent], (parent, child)
    envs = label_record(fsdp["image"])["testcase_envs"]
    assert [(e["case"], e["target"]) for e in envs] == [("pytorch/fsdp", "gpu-debian-12-x86_64")]
    cuda = in_image(
        fsdp["image"], f"{envs[0]['path']}/bin/python", "-c", "import torch; print(torch.version.cuda)"
    )
    assert cuda.splitlines()[-1] == STACK["components"]["pytorch"]["cuda_runtime"]
