"""What the verifiers of the fabric scenarios read from a node where aws-ofi-nccl and nccl-tests were built.

Why one module: the fabric scenario (make test) and fabric_build (make test-slow) build the same releases in
different settings (the EFA installer's layout; the distribution's libraries, with and without MPI) and must
judge them by the same facts: the release's own program list, NCCL's own plugin lookup, the stamp the roles
write.
"""

from __future__ import annotations

import json
import re
import tarfile

from scripts import fabric_mirror

# The symbols NCCL 2.29's net plugin lookup asks for, newest first (src/plugin/net/net_v*.cc: dlsym of
# ncclNetPlugin_v11 down to _v6); it takes the first one the library exports.
NCCL_NET_SYMBOLS = [f"ncclNetPlugin_v{n}" for n in range(11, 5, -1)]
# What the plugin may link: libfabric, hwloc and the C/C++ runtimes (no NCCL, no libcudart: it carries NCCL's
# plugin headers and links the CUDA runtime statically).
PLUGIN_NEEDED = re.compile(
    r"^(libfabric\.so\.1|libhwloc\.so\.\d+"
    r"|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|ld-linux-x86-64\.so\.2)$"
)


def release_programs(version: str) -> set[str]:
    """Every program nccl-tests' own src/Makefile builds (BIN_FILES_LIST), read from the release source."""
    tarball = fabric_mirror.default_upstream() / f"nccl-tests-{version}.tar.gz"
    with tarfile.open(tarball) as tar:
        makefile = tar.extractfile(f"nccl-tests-{version}/src/Makefile").read().decode()
    names = re.search(r"^BIN_FILES_LIST := (.+)$", makefile, re.MULTILINE).group(1).split()
    return {f"{name}_perf" for name in names}


def served_source(host, artifact: str, url: str, directory: str) -> tuple[bool, str]:
    """Whether the mirror served `artifact` as a stand-in (its lock file on the node), and the sha256 of the
    file the role downloaded into `directory` (the URL's file name). A real source: (False, its lock's)."""
    served = json.loads(host.file("/var/cache/trainstack/fabric-mirror.lock.json").content_string)
    digest = host.check_output(f"sha256sum {directory}/{url.rsplit('/', 1)[-1]}").split()[0]
    return served["artifacts"][artifact]["standin"], digest


def stamp(host, path: str) -> tuple[str, str]:
    """The stamp a build role writes: its first line (what was built, how) and the key of its inputs."""
    first, key = host.file(path).content_string.splitlines()
    return first, key.removeprefix("key ")


def needed(host, library: str) -> list[str]:
    """The library's NEEDED entries, as the dynamic linker reads them."""
    dynamic = host.check_output(f"readelf -dW {library}")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)


def nccl_net_lookup(host) -> list[str]:
    """Open the plugin as NCCL does (libnccl-net.so by default, libnccl-net-<name>.so for NCCL_NET_PLUGIN=ofi,
    through the dynamic linker: src/plugin/plugin_open.cc) and report, per name, the first interface symbol
    found, the plugin's own name in it, and how many of the symbols NCCL asks for it exports."""
    code = (
        "import ctypes\n"
        "for lib in ('libnccl-net.so', 'libnccl-net-ofi.so'):\n"
        "    handle = ctypes.CDLL(lib)\n"
        f"    found = [s for s in {NCCL_NET_SYMBOLS!r} if hasattr(handle, s)]\n"
        "    name = ctypes.c_char_p.in_dll(handle, found[0]).value.decode()\n"
        "    print(lib, found[0], name, len(found))\n"
    )
    return host.check_output(f'python3 -c "{code}"').splitlines()


def nccl_tests_header(tests_version: str, nccl_version: str) -> str:
    """The first line an nccl-tests program prints: its release and the NCCL of its headers and library."""
    code = "{}{:02d}{:02d}".format(*map(int, nccl_version.split(".")))
    return f"# nccl-tests version {tests_version} nccl-headers={code} nccl-library={code}"
