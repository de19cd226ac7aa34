"""The ec2_cluster plugin module's own helpers (the model has its tests in test_ec2_cluster_model.py)."""

from __future__ import annotations

import gc

import pytest
from ansible_collections.trainstack.cluster.plugins.inventory import ec2_cluster


def test_collector_paused_while_building_and_restored_after():
    assert gc.isenabled()
    with ec2_cluster.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collector_restored_after_an_error():
    with pytest.raises(RuntimeError), ec2_cluster.collector_paused():
        raise RuntimeError("parse failed")
    assert gc.isenabled()


def test_collector_left_off_when_it_was_off():
    """A caller that turned the collector off keeps it off: the plugin restores, never forces, the state."""
    gc.disable()
    try:
        with ec2_cluster.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
