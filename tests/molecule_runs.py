"""What the molecule verifiers share: running one of a role's entry points again on the scenario's node.

A verifier that proves a role's `verify` refuses a wrong state, or that `install` puts it right, has to run
that entry point itself, with the scenario's inventory and with output it can match line by line.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def run_entry_point(playbook: Path, variable: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    """`ansible-playbook <playbook> -e <variable>=<name>` against the scenario's inventory; never raises on
    failure, since refusals are what the verifiers look for."""
    inventory = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "inventory"
    return subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(playbook), "-e", f"{variable}={name}", *extra],
        stdout=subprocess.PIPE,
        # Failures may be shown on stderr (ANSIBLE_DISPLAY_FAILED_STDERR): one stream, in order.
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
        # A standard input of its own: ansible-playbook refuses to start on a shared one that an earlier child
        # left non-blocking.
        stdin=subprocess.DEVNULL,
        # One line per result, uncoloured: the messages are matched whole.
        env={
            **os.environ,
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        },
    )


def changed(run: subprocess.CompletedProcess, host: str) -> int:
    """The recap's changed count for one host of a run."""
    return int(re.search(rf"^{re.escape(host)}\s.*\bchanged=(\d+)", run.stdout, re.M).group(1))
