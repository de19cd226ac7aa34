"""Verifier: the enroot the role built runs a container inside the LXC node (a few seconds, no registry).

The image is made on the node from its own Debian shell: dash, cat and readlink with the libraries ldd names,
packed with mksquashfs (the role's squashfs-tools). enroot create unpacks it, enroot start runs the shell in
new user and mount namespaces. The registry import and pyxis on two nodes are in
tests/integration/fabric/test_enroot_lab.py (slow).
"""

import shlex

OS_RELEASE = "ID=trainstack-enroot-verify"
BUILD = f"""
set -eu
work=$(mktemp -d /scratch/enroot/tmp/verify.XXXXXX)
trap 'enroot remove -f verify-probe >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$work/root/bin" "$work/root/etc"
for tool in dash cat readlink; do
  cp "$(command -v $tool)" "$work/root/bin/"
  for lib in $(ldd "$(command -v $tool)" | grep -o '/[^ ]*'); do cp --parents "$lib" "$work/root"; done
done
ln -s dash "$work/root/bin/sh"
echo {OS_RELEASE} > "$work/root/etc/os-release"
mksquashfs "$work/root" "$work/probe.sqsh" -quiet -noappend
enroot create --name verify-probe "$work/probe.sqsh" >/dev/null
enroot start verify-probe sh -c 'cat /etc/os-release; echo mnt=$(readlink /proc/self/ns/mnt)'
"""


def test_enroot_starts_a_shell_in_the_lxc_node(host):
    run = host.run(f"bash -c {shlex.quote(BUILD)}")
    assert run.rc == 0, run.stdout + run.stderr
    assert OS_RELEASE in run.stdout.splitlines()
    # The container's mount namespace is its own, not the node's.
    inside = next(line for line in run.stdout.splitlines() if line.startswith("mnt="))
    assert inside != f"mnt={host.check_output('readlink /proc/self/ns/mnt')}"
    assert not host.run("enroot list").stdout.strip()
