#!/usr/bin/python3
"""Assemble instance-store NVMe disks as one scratch file system; run by the role and again at every boot.

Why a boot-time program rather than fstab: instance-store disks come back blank after a stop/start and may be
enumerated in another order, so the array may need assembling (reboot) or creating again (new disks). The same
code runs at configuration time and at boot, so what the role tested is what boot does. The decision
(`plan`) is a pure function of what was observed, separate from the commands that carry it out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

EC2_INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"


class ScratchError(RuntimeError):
    """A state the program must not touch (it would destroy data it does not own)."""


@dataclass
class Config:
    devices: list[str]
    mount_point: str
    filesystem: str = "xfs"
    array_name: str = "scratch"
    mount_options: str = "defaults,noatime"
    mode: str = "1777"
    # Off in containers: /sys/block there shows the host's disks, which are not the container's to format.
    discover: bool = True


@dataclass
class State:
    """What is on the host now."""

    devices: list[str]
    array_active: bool = False
    members_in_array: list[str] = field(default_factory=list)
    filesystem: str | None = None
    mounted_source: str | None = None


def target_device(cfg: Config, devices: list[str]) -> str:
    """One disk is used as it is; two or more become a RAID0 array under /dev/md/<name>."""
    return devices[0] if len(devices) == 1 else f"/dev/md/{cfg.array_name}"


def plan(cfg: Config, state: State) -> list[str]:
    """Actions that bring the host to the configured state, in order; [] when it is already there.

    Without instance-store disks there is nothing to assemble: the mount point stays a directory on the root
    volume (see `ensure_mount_point`), so that jobs and enroot still find their scratch path.
    """
    if not state.devices:
        return []
    actions: list[str] = []
    fresh = False
    if len(state.devices) > 1 and not state.array_active:
        members = set(state.members_in_array)
        if members == set(state.devices):
            actions.append("assemble")
        elif not members:
            actions.append("create")
            fresh = True
        else:
            raise ScratchError(
                f"only {sorted(members)} of {state.devices} carry the array's metadata: refusing to recreate"
            )
    if fresh or state.filesystem is None:
        actions.append("mkfs")
    elif state.filesystem != cfg.filesystem:
        raise ScratchError(
            f"{target_device(cfg, state.devices)} holds {state.filesystem}, not {cfg.filesystem}: "
            "refusing to format"
        )
    if state.mounted_source is None:
        actions.append("mount")
    return actions


# ---------------------------------------------------------------- observing and acting (commands)


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def discover() -> list[str]:
    """Instance-store NVMe disks by their model string (EBS volumes report another model)."""
    found = []
    for name in sorted(os.listdir("/sys/block")):
        model_file = f"/sys/block/{name}/device/model"
        if name.startswith("nvme") and os.path.exists(model_file):
            with open(model_file, encoding="utf-8") as handle:
                if handle.read().strip() == EC2_INSTANCE_STORE_MODEL:
                    found.append(f"/dev/{name}")
    return found


def observe(cfg: Config) -> State:
    devices = cfg.devices or (discover() if cfg.discover else [])
    state = State(devices=devices)
    target = target_device(cfg, devices) if devices else None
    if len(devices) > 1:
        state.array_active = os.path.exists(target)
        state.members_in_array = [
            d for d in devices if _run(["mdadm", "--examine", d], check=False).returncode == 0
        ]
    if target and os.path.exists(target):
        blkid = _run(["blkid", "-o", "value", "-s", "TYPE", target], check=False)
        state.filesystem = blkid.stdout.strip() or None
    findmnt = _run(["findmnt", "-n", "-o", "SOURCE", "--mountpoint", cfg.mount_point], check=False)
    state.mounted_source = findmnt.stdout.strip() or None
    return state


def apply(cfg: Config, state: State, actions: list[str]) -> None:
    target = target_device(cfg, state.devices) if state.devices else ""
    for action in actions:
        if action == "create":
            _run(
                [
                    "mdadm",
                    "--create",
                    target,
                    "--run",
                    "--level=0",
                    "--force",
                    f"--raid-devices={len(state.devices)}",
                    *state.devices,
                ]
            )
        elif action == "assemble":
            _run(["mdadm", "--assemble", target, *state.devices])
        elif action == "mkfs":
            _run([f"mkfs.{cfg.filesystem}", "-q" if cfg.filesystem.startswith("ext") else "-f", target])
        elif action == "mount":
            os.makedirs(cfg.mount_point, exist_ok=True)
            _run(["mount", "-t", cfg.filesystem, "-o", cfg.mount_options, target, cfg.mount_point])


def ensure_mount_point(cfg: Config) -> bool:
    """Mount point present with the configured mode (sticky, world-writable by default); True if changed."""
    mode = int(cfg.mode, 8)
    if os.path.isdir(cfg.mount_point) and (os.stat(cfg.mount_point).st_mode & 0o7777) == mode:
        return False
    os.makedirs(cfg.mount_point, exist_ok=True)
    os.chmod(cfg.mount_point, mode)
    return True


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "/etc/trainstack/nvme-scratch.json"
    with open(path, encoding="utf-8") as handle:
        cfg = Config(**json.load(handle))
    state = observe(cfg)
    try:
        actions = plan(cfg, state)
    except ScratchError as exc:
        print(f"nvme-scratch: {exc}", file=sys.stderr)
        return 2
    apply(cfg, state, actions)
    changed = ensure_mount_point(cfg) or bool(actions)
    print(json.dumps({"devices": state.devices, "actions": actions, "changed": changed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
