"""Verifier for roles/gdrcopy, built for real on a GPU-less lab container: the library and tools installed
and linked (libgdrapi through the linker cache, libcuda from Debian's 535 driver), gdrdrv built against the
driver's headers for the image's installed kernel (read with `modinfo -k`, not loaded: the host's kernel runs
here), and the boot service that loads it where a GPU driver is present.

What needs a GPU and /dev/gdrdrv (loading gdrdrv, gdrcopy_sanity, the copy benchmarks) cannot run in a
container: it is not asserted here.
"""

import pytest

PREFIX = "/usr/local"
# GDRCopy 2.5.x: library and driver ABI 2.5.
ABI = "2.5"
TOOLS = ["gdrcopy_copybw", "gdrcopy_copylat", "gdrcopy_apiperf", "gdrcopy_sanity", "gdrcopy_pplat"]
# What gdrdrv calls in the NVIDIA driver (nv-p2p.h): resolved when it loads next to nvidia.ko.
P2P_SYMBOLS = {"nvidia_p2p_get_pages", "nvidia_p2p_put_pages", "nvidia_p2p_free_page_table"}


def _kernels(host) -> list[str]:
    out = host.check_output("find /lib/modules -mindepth 2 -maxdepth 2 -name modules.order -printf '%h\\n'")
    return sorted(line.rsplit("/", 1)[1] for line in out.splitlines())


def test_an_installed_kernel_that_is_not_running(host):
    kernels = _kernels(host)
    assert kernels and host.check_output("uname -r") not in kernels


def test_library_installed_with_its_links(host):
    lib = host.file(f"{PREFIX}/lib/libgdrapi.so.{ABI}")
    assert lib.is_file and not lib.is_symlink
    assert host.file(f"{PREFIX}/lib/libgdrapi.so.2").linked_to == lib.path
    assert host.file(f"{PREFIX}/lib/libgdrapi.so").linked_to == lib.path
    assert "(SONAME)" in host.check_output(
        f"readelf -d {lib.path} | grep 'Library soname: \\[libgdrapi.so.2\\]'"
    )
    assert host.file(f"{PREFIX}/include/gdrapi.h").contains("#define GDR_API_MINOR_VERSION    5")


def test_library_found_through_the_linker_cache(host):
    cache = host.check_output("ldconfig -p")
    assert f"libgdrapi.so.2 (libc6,x86-64) => {PREFIX}/lib/libgdrapi.so.2" in cache


def test_a_program_links_the_library_and_reads_its_version(host):
    """Compiled against the installed header, run through the dynamic loader (no GPU needed for this call)."""
    source = (
        "#include <stdio.h>\n#include <gdrapi.h>\n"
        'int main(void){int a,b;gdr_runtime_get_version(&a,&b);printf("%d.%d\\n",a,b);return 0;}\n'
    )
    host.check_output(f"printf '%s' '{source}' > /tmp/gdrver.c")
    host.check_output(f"cc -I{PREFIX}/include /tmp/gdrver.c -L{PREFIX}/lib -lgdrapi -o /tmp/gdrver")
    assert host.check_output("/tmp/gdrver") == ABI


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_installed_and_fully_linked(host, tool):
    path = f"{PREFIX}/bin/{tool}"
    assert host.file(path).mode & 0o111
    ldd = host.check_output(f"ldd {path}")
    assert "not found" not in ldd, ldd
    assert f"libgdrapi.so.2 => {PREFIX}/lib/libgdrapi.so.2" in ldd
    libcuda = host.check_output(f"readlink -f $(ldd {path} | awk '$1 == \"libcuda.so.1\" {{print $3}}')")
    # The driver's library (Debian's libcuda1), not a stub.
    assert libcuda.endswith("/libcuda.so.535.261.03"), libcuda


def test_gdrdrv_built_for_every_installed_kernel(host):
    for kver in _kernels(host):
        filename = host.check_output(f"modinfo -k {kver} -F filename gdrdrv")
        assert filename == f"/lib/modules/{kver}/extra/gdrdrv.ko"
        assert host.check_output(f"modinfo -k {kver} -F vermagic gdrdrv").startswith(f"{kver} ")
        assert host.check_output(f"modinfo -k {kver} -F version gdrdrv") == ABI
        assert "extra/gdrdrv.ko:" in host.check_output(f"cat /lib/modules/{kver}/modules.dep")


def test_gdrdrv_built_against_the_proprietary_driver_headers(host):
    kver = _kernels(host)[0]
    # gdrdrv takes the flavour from the driver source it compiles against: Debian's 535 is proprietary.
    description = host.check_output(f"modinfo -k {kver} -F description gdrdrv")
    assert description == "GDRCopy kernel-mode driver built for proprietary NVIDIA driver"
    undefined = set(host.check_output(f"nm -u /lib/modules/{kver}/extra/gdrdrv.ko").split())
    assert undefined >= P2P_SYMBOLS


def test_service_enabled_and_skipped_without_a_gpu_driver(host):
    unit = host.file("/etc/systemd/system/gdrcopy.service")
    assert "ExecStart=/sbin/modprobe gdrdrv" in unit.content_string
    assert host.run("systemctl is-enabled gdrcopy.service").stdout.strip() == "enabled"
    # No /dev/nvidiactl in a container: starting it must be a skipped condition, not a failed modprobe.
    assert not host.file("/dev/nvidiactl").exists
    assert host.run("systemctl start gdrcopy.service").rc == 0
    show = host.check_output("systemctl show -p ConditionResult -p ActiveState gdrcopy.service")
    assert set(show.split()) == {"ConditionResult=no", "ActiveState=inactive"}
