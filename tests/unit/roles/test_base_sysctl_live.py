"""Which kernel settings the base role sets live, besides writing them to its sysctl.d file.

Why it matters: an image built in a chroot (buildah, playbooks/build_container.yml) shares the build host's
kernel, so a live `sysctl -w` there would retune the build host, not the image. A container shares its host's
kernel-wide keys; a machine or VM gets them all.
"""

from __future__ import annotations

from tests.support import init_ansible_plugins, role_data_templar, template_value

init_ansible_plugins()

FACTS = {"virtualization_role": "host", "virtualization_type": "kvm", "memtotal_mb": 65536}


def live_keys(**facts: object) -> list[str]:
    templar = role_data_templar("base", ansible_facts={**FACTS, **facts})
    return list(template_value(templar, "__base_sysctl_live"))


def test_a_machine_gets_every_key_live() -> None:
    keys = live_keys(is_chroot=False)
    assert "net.core.rmem_max" in keys and "net.ipv4.tcp_rmem" in keys


def test_a_container_gets_only_the_keys_of_its_network_namespace() -> None:
    keys = live_keys(is_chroot=False, virtualization_role="guest", virtualization_type="lxc")
    assert "net.ipv4.tcp_rmem" in keys and "net.core.rmem_max" not in keys


def test_a_chroot_image_build_sets_nothing_on_the_build_host() -> None:
    assert live_keys(is_chroot=True) == []
