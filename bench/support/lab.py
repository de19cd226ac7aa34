"""Where this checkout, its virtualenv and the lab's SSH key are, and the environment in which ansible-*
commands use the collection from this checkout: the same for a benchmark and a test, so that a timing and an
assertion see the same Ansible."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
LAB_KEY = Path("/var/lib/trainstack/lab/ssh/id_ed25519")

# How tests and benchmarks reach lab nodes: root over SSH with the lab key; node host keys are made per boot.
LAB_SSH = [
    "ssh",
    "-i",
    str(LAB_KEY),
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "ConnectTimeout=10",
    "-o",
    "LogLevel=ERROR",
]


def ansible_env(**extra: str) -> dict[str, str]:
    """Environment in which ansible-* commands resolve trainstack.cluster from this checkout."""
    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
    )
    env.update(extra)
    return env
