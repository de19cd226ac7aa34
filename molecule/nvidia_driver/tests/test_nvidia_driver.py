"""Verifier for roles/nvidia_driver (Debian non-free 535, real packages): reads the node's real state.

No GPU here: what is checked is what an image must hold before it boots on one — a module built for the
installed kernel, nouveau kept out of the initramfs, packages held, units enabled — and the flavour loader's
decisions against fake PCI trees (sysfs layout, real script, real installed module).
"""

import json

import pytest

VERSION = "535.261.03"
LOADER = "/usr/local/sbin/trainstack-nvidia-flavour"
# PCI device ids: V100 (Volta), H100 SXM (Hopper), B200 (Blackwell).
DEVICES = {"v100": "0x1db1", "h100": "0x2330", "b200": "0x2901"}


def _kernels(host) -> list[str]:
    out = host.check_output("find /lib/modules -mindepth 2 -maxdepth 2 -name modules.order -printf '%h\\n'")
    return sorted(line.rsplit("/", 1)[1] for line in out.splitlines())


def test_a_debian_kernel_is_installed_and_not_running(host):
    kernels = _kernels(host)
    assert kernels, "no kernel under /lib/modules"
    assert host.check_output("uname -r") not in kernels


def test_module_built_for_every_installed_kernel(host):
    for kver in _kernels(host):
        assert host.check_output(f"modinfo -k {kver} -F version nvidia") == VERSION
        assert "NVIDIA" in host.check_output(f"modinfo -k {kver} -F license nvidia")
        # Built by DKMS for that kernel, not shipped prebuilt. Debian names it nvidia-current.ko; the role
        # links the upstream name to it (modinfo reads no modprobe.d aliases).
        filename = host.check_output(f"modinfo -k {kver} -F filename nvidia")
        assert filename == f"/lib/modules/{kver}/updates/dkms/nvidia.ko"
        debian_file = f"/lib/modules/{kver}/updates/dkms/nvidia-current.ko"
        assert host.check_output(f"readlink -f {filename}") == host.check_output(f"readlink -f {debian_file}")
        assert host.file(filename).is_symlink
        assert host.check_output(f"modinfo -k {kver} -F version nvidia-current") == VERSION
        assert host.check_output(f"modinfo -k {kver} -F vermagic nvidia").startswith(f"{kver} ")


def test_no_headers_for_kernels_the_image_lacks(host):
    # Only the installed kernel's headers: a stray generic headers package would make DKMS build twice.
    headers = host.check_output("find /lib/modules -mindepth 2 -maxdepth 2 -name build -printf '%h\\n'")
    assert sorted(line.rsplit("/", 1)[1] for line in headers.splitlines()) == _kernels(host)


def test_dkms_reports_installed_for_every_kernel(host):
    status = host.check_output(f"dkms status -m nvidia-current -v {VERSION}")
    for kver in _kernels(host):
        assert f"{kver}, x86_64: installed" in status


def test_nouveau_blacklisted_in_initramfs(host):
    conf = host.file("/etc/modprobe.d/trainstack-blacklist-nouveau.conf")
    assert "blacklist nouveau" in conf.content_string
    for kver in _kernels(host):
        listing = host.check_output(f"lsinitramfs /boot/initrd.img-{kver}")
        assert "etc/modprobe.d/trainstack-blacklist-nouveau.conf" in listing


def test_driver_and_kernel_packages_held(host):
    held = host.check_output("apt-mark showhold").split()
    assert {"nvidia-kernel-dkms", "nvidia-smi", "linux-image-cloud-amd64"} <= set(held)


def test_non_free_components_configured(host):
    line = host.file("/etc/apt/sources.list.d/trainstack-nvidia-nonfree.list").content_string
    assert "contrib non-free non-free-firmware" in line
    assert host.package("nvidia-kernel-dkms").version.startswith(VERSION)


@pytest.mark.parametrize("unit", ["nvidia-persistenced.service", "trainstack-nvidia-flavour.service"])
def test_boot_units_enabled(host, unit):
    assert host.run(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"


def test_state_record(host):
    record = json.loads(host.file("/etc/trainstack/nvidia-driver.json").content_string)
    assert record["version"] == VERSION
    assert record["kernel_modules"] == "proprietary"
    assert record["kernels"] == _kernels(host)


def _fake_sysfs(host, name: str, devices: list[str]) -> str:
    root = f"/tmp/sysfs-{name}"
    host.check_output(f"rm -rf {root}")
    for index, device in enumerate(devices):
        path = f"{root}/bus/pci/devices/0000:{index + 16:02x}:00.0"
        host.check_output(
            f"mkdir -p {path} && echo 0x10de > {path}/vendor && echo {device} > {path}/device"
            f" && echo 0x030200 > {path}/class"
        )
    return root


@pytest.mark.parametrize("gpu", ["v100", "h100"])
def test_loader_keeps_installed_proprietary_modules(host, gpu):
    kver = _kernels(host)[0]
    sysfs = _fake_sysfs(host, gpu, [DEVICES[gpu]] * 8)
    out = host.check_output(f"{LOADER} --sysfs {sysfs} --kernel {kver} --run-dir /tmp/run-{gpu}")
    fields = dict(item.split("=", 1) for item in out.split())
    assert fields["gpus"] == "8"
    assert fields["installed"] == "proprietary"
    assert fields["chosen"] == "proprietary"
    assert fields["action"] == "installed"


def test_loader_refuses_blackwell_without_open_modules(host):
    kver = _kernels(host)[0]
    sysfs = _fake_sysfs(host, "b200", [DEVICES["b200"]] * 8)
    result = host.run(f"{LOADER} --sysfs {sysfs} --kernel {kver} --run-dir /tmp/run-b200")
    assert result.rc == 1
    assert f"no open modules for kernel {kver}" in result.stderr


def test_loader_without_gpu_does_nothing(host):
    sysfs = _fake_sysfs(host, "none", [])
    assert host.check_output(f"{LOADER} --sysfs {sysfs}").startswith("gpus=0 ")
