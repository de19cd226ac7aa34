"""The test support's runner gives the commands it starts a standard input of their own.

A child that shares the test process's stdin may leave it non-blocking (``buildah run`` does), and every
ansible-* program then refuses to start ("Ansible requires blocking IO"): a later test in the same process
fails for a reason of an earlier one. Here the process's stdin is made such a non-blocking pipe, as buildah
leaves it, and ``ansible --version`` must still start through tests.support.run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tests.support import VENV_BIN, run


@contextlib.contextmanager
def non_blocking_stdin() -> Iterator[None]:
    """fd 0 replaced by the read end of a non-blocking pipe for the block, then put back as it was."""
    saved = os.dup(0)
    read, write = os.pipe()
    try:
        os.dup2(read, 0)
        os.set_blocking(0, False)
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)


def test_an_ansible_command_starts_when_the_shared_stdin_is_non_blocking() -> None:
    with non_blocking_stdin():
        proc = run([str(VENV_BIN / "ansible"), "--version"], check=False)
    assert proc.returncode == 0, proc.stderr
    assert "requires blocking IO" not in proc.stderr


def test_a_caller_that_passes_input_gets_it_read() -> None:
    proc = run(["cat"], input="to the child\n")
    assert proc.stdout == "to the child\n"
