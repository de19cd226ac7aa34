"""roles/pytorch refuses a bad wheelhouse before the host changes: a torch wheel whose sha256 is not the
stack's (here: a file of the right name with other bytes, a stand-in for a corrupted or substituted
download), and a wheelhouse with no torch wheel at all. Run against the lab's head node."""

from __future__ import annotations

import pytest

from tests.support import VENV_BIN, on_lab_node, run

pytestmark = pytest.mark.lab
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
STACK_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
UNTOUCHED = (
    "test ! -e /opt/trainstack/venv && test ! -e /var/cache/trainstack/pytorch-wheels && echo untouched"
)


def apply_role(wheelhouse) -> str:
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "tests/integration/image/pytorch_role.yml",
            "-i",
            "inventories/local/hosts.yml",
            "-l",
            "ts-head",
            "-e",
            f"pytorch_wheelhouse={wheelhouse}",
        ],
        check=False,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    return proc.stdout


@pytest.fixture
def head(lab):
    assert on_lab_node(UNTOUCHED) == "untouched"


def test_substituted_wheel_is_refused_naming_both_hashes(head, tmp_path):
    (tmp_path / WHEEL).write_bytes(b"not the wheel the stack pins")
    out = apply_role(tmp_path)
    assert "Refuse a wheel the stack does not vouch for" in out
    assert STACK_SHA in out and WHEEL in out
    assert on_lab_node(UNTOUCHED) == "untouched"


def test_wheelhouse_without_torch_is_refused(head, tmp_path):
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    out = apply_role(tmp_path)
    assert "has no torch 2.13.0 (cpu) wheel for cp311" in out
    assert on_lab_node(UNTOUCHED) == "untouched"
