"""nvme_scratch's decision logic (roles/nvme_scratch/files/nvme_scratch.py `plan`), every branch.

The program that runs at every boot separates observing the host from deciding; the decision is tested here
exhaustively, the commands on real loop devices in tests/integration/fabric/test_nvme_scratch_host.py.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.support import REPO


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "nvme_scratch", REPO / "roles" / "nvme_scratch" / "files" / "nvme_scratch.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through the module registry
    spec.loader.exec_module(module)
    return module


ns = _load()
TWO = ["/dev/nvme1n1", "/dev/nvme2n1"]


def cfg(**kw) -> ns.Config:
    return ns.Config(devices=kw.pop("devices", []), mount_point="/scratch", **kw)


def test_no_instance_store_means_nothing_to_assemble():
    assert ns.plan(cfg(), ns.State(devices=[])) == []


def test_blank_disks_are_striped_formatted_and_mounted():
    assert ns.plan(cfg(), ns.State(devices=TWO)) == ["create", "mkfs", "mount"]


def test_reboot_reassembles_without_formatting():
    state = ns.State(devices=TWO, members_in_array=list(TWO), filesystem="xfs")
    assert ns.plan(cfg(), state) == ["assemble", "mount"]


def test_running_array_only_needs_mounting():
    state = ns.State(devices=TWO, array_active=True, members_in_array=list(TWO), filesystem="xfs")
    assert ns.plan(cfg(), state) == ["mount"]


def test_everything_in_place_is_no_action():
    state = ns.State(
        devices=TWO,
        array_active=True,
        members_in_array=list(TWO),
        filesystem="xfs",
        mounted_source="/dev/md127",
    )
    assert ns.plan(cfg(), state) == []


def test_single_disk_is_used_directly():
    assert ns.target_device(cfg(), ["/dev/nvme1n1"]) == "/dev/nvme1n1"
    assert ns.plan(cfg(), ns.State(devices=["/dev/nvme1n1"])) == ["mkfs", "mount"]
    assert ns.plan(cfg(), ns.State(devices=["/dev/nvme1n1"], filesystem="xfs")) == ["mount"]


def test_array_device_is_named():
    assert ns.target_device(cfg(array_name="fast"), TWO) == "/dev/md/fast"


def test_partly_assembled_members_are_refused():
    state = ns.State(devices=TWO, members_in_array=TWO[:1])
    with pytest.raises(ns.ScratchError, match="refusing to recreate"):
        ns.plan(cfg(), state)


def test_foreign_file_system_is_never_formatted():
    with pytest.raises(ns.ScratchError, match="holds ext4, not xfs: refusing to format"):
        ns.plan(cfg(), ns.State(devices=["/dev/nvme1n1"], filesystem="ext4"))


def test_fresh_array_is_formatted_even_if_a_stale_signature_shows():
    # A newly created array may expose a stale signature from an earlier life; it is new, so it is formatted.
    assert ns.plan(cfg(), ns.State(devices=TWO, filesystem="xfs")) == ["create", "mkfs", "mount"]
