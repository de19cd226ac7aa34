"""roles/munge's key settings: generated on the head node by default, or a supplied key that must be 32
bytes of base64; the role's assert rendered with Ansible's templar (the key never appears in its message).
tests/integration/image/test_image_identity.py boots lab nodes from an image without the key.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest

from tests.support import assert_task_failure, role_data_templar, role_task, template_value


def _munge_check(**variables: Any) -> str | None:
    templ = role_data_templar(
        "munge",
        groups={"all": ["head1", "gpu1"], "head": ["head1"]},
        ansible_play_hosts_all=["head1", "gpu1"],
        **variables,
    )
    return assert_task_failure(templ, role_task("munge", "main.yml", "Check the munge settings"))


def test_munge_generates_on_the_head_by_default():
    assert _munge_check() is None
    assert template_value(role_data_templar("munge", groups={"head": ["head1"]}), "munge_key_host") == "head1"


def test_munge_accepts_a_supplied_32_byte_key():
    assert _munge_check(munge_key=base64.b64encode(os.urandom(32)).decode()) is None


@pytest.mark.parametrize("key", [base64.b64encode(b"short").decode(), "not base64 at all!" * 4])
def test_munge_refuses_a_short_or_garbled_key(key):
    message = _munge_check(munge_key=key)
    assert message is not None and "munge_key must be empty" in message and key not in message


def test_munge_refuses_an_unknown_key_host():
    message = _munge_check(munge_key_host="nowhere")
    assert message is not None and "munge_key_host (nowhere) must be an inventory host" in message
