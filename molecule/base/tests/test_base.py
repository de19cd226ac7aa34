"""Verifier for roles/base: reads the effective values inside the node, not only the files written."""

import pytest

# Keys a container's own network namespace holds: their live value must be the tuned one.
LIVE_SYSCTLS = {
    "net.ipv4.tcp_congestion_control": "bbr",
    "net.ipv4.tcp_rmem": "4096 87380 268435456",
    "net.ipv4.tcp_wmem": "4096 65536 268435456",
    "net.ipv4.tcp_mtu_probing": "1",
    "net.ipv4.tcp_slow_start_after_idle": "0",
}
# Host-wide keys: in a container they are only written for boot; on a VM or metal they are live too.
BOOT_SYSCTLS = {
    "net.core.default_qdisc": "fq",
    "net.core.rmem_max": "268435456",
    "net.core.wmem_max": "268435456",
    "vm.nr_hugepages": "64",
}


def _sysctl_file(host) -> dict[str, str]:
    content = host.file("/etc/sysctl.d/90-trainstack.conf").content_string
    pairs = (line.split("=", 1) for line in content.splitlines() if "=" in line and not line.startswith("#"))
    return {k.strip(): " ".join(v.split()) for k, v in pairs}


@pytest.mark.parametrize(("key", "value"), sorted(LIVE_SYSCTLS.items()))
def test_live_sysctl(host, key, value):
    live = " ".join(host.check_output(f"sysctl -n {key}").split())
    assert live == value


@pytest.mark.parametrize(("key", "value"), sorted({**LIVE_SYSCTLS, **BOOT_SYSCTLS}.items()))
def test_boot_sysctl_file(host, key, value):
    assert _sysctl_file(host).get(key) == value


def test_session_limits(host):
    # A new PAM session, as a fresh login gets (the verifier's own SSH session may be multiplexed and older).
    assert host.check_output("runuser -l root -c 'ulimit -l'") == "4096"
    assert host.check_output("runuser -l root -c 'ulimit -n'") == "16384"


def test_service_limits(host):
    # What a service started by systemd (slurmd, a container runtime) really gets.
    out = host.check_output("systemd-run --wait --pipe --quiet sh -c 'ulimit -l; ulimit -n'")
    assert out.split() == ["4096", "16384"]


def test_no_automatic_upgrades(host):
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer"):
        assert host.run(f"systemctl is-enabled {unit}").stdout.strip() == "masked"
    periodic = host.file("/etc/apt/apt.conf.d/20auto-upgrades").content_string
    assert 'APT::Periodic::Unattended-Upgrade "0";' in periodic


def test_package_held(host):
    assert "iproute2" in host.check_output("apt-mark showhold").split()


def test_node_not_degraded(host):
    # Masking units must not leave them failed: a degraded node fails health checks.
    assert host.run("systemctl is-system-running").stdout.strip() == "running"
