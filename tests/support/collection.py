"""Where the checkout is and how a test runs the collection from it.

Every kind of test (unit, moto, lab) runs ``ansible``/``ansible-playbook`` from the repository root with the
venv's programs and this checkout as the ``trainstack.cluster`` collection; this module is that one recipe, so
that no test builds its own environment or command line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# The venv and the Ansible environment are product code, shared with the benchmarks (bench/support/lab.py).
from bench.support.lab import VENV_BIN, ansible_env

__all__ = ["LOCALHOST_ARGS", "REPO", "VENV_BIN", "ansible_env", "playbook", "run"]

REPO = Path(__file__).resolve().parents[2]


def run(
    cmd: list[str], *, check: bool = True, timeout: int = 900, **kw: object
) -> subprocess.CompletedProcess:
    """Run a command from the repository root with the Ansible environment, capturing text output.

    The command gets a standard input of its own (none to read) unless the caller passes ``input`` or
    ``stdin``: a child that shares the test process's stdin may leave it non-blocking (``buildah run`` does),
    and every ansible-* program then refuses to start ("Ansible requires blocking IO")."""
    kw.setdefault("env", ansible_env())
    kw.setdefault("cwd", REPO)
    if "input" not in kw:
        kw.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and proc.returncode != 0:
        tail = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{tail}")
    return proc


# ansible/ansible-playbook arguments that run on this machine with the venv's Python, as a one-host inventory.
LOCALHOST_ARGS = [
    "-i",
    "localhost,",
    "-c",
    "local",
    "-e",
    f"ansible_python_interpreter={VENV_BIN / 'python'}",
]


def playbook(name: str, *args: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess:
    """Run one of the collection's playbooks by its FQCN."""
    return run([str(VENV_BIN / "ansible-playbook"), f"trainstack.cluster.{name}", *args], check=check, **kw)
