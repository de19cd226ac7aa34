"""What the GPU proof carries from a test case's GPU lock, and what it records about the run's environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gpu import lock_carry

TARGET = lock_carry.DEFAULT_TARGET


def test_every_pin_of_a_real_lock_is_read_with_its_hashes() -> None:
    text = lock_carry.lock_path("megatron/gpt", TARGET).read_text(encoding="utf-8")
    pins = {pin.name: pin for pin in lock_carry.parse_lock(text)}
    assert pins["megatron-core"].version == "0.16.1"
    assert pins["torch"].version and pins["typing-extensions"].version
    # Every pin line of the lock is read, and each with at least one hash.
    assert len(pins) == sum(1 for line in text.splitlines() if line[:1].isalnum())
    assert all(pin.hashes and all(h.startswith("sha256:") for h in pin.hashes) for pin in pins.values())


def test_the_platform_comes_from_the_locks_header() -> None:
    text = lock_carry.lock_path("pytorch/fsdp", TARGET).read_text(encoding="utf-8")
    python, tags = lock_carry.platform_of(text)
    assert python == "3.12"
    assert tags[0] == "manylinux_2_39_x86_64" and "manylinux_2_17_x86_64" in tags and tags[-1] == "any"


def test_a_lock_without_its_header_is_refused() -> None:
    with pytest.raises(lock_carry.CarryError, match="header"):
        lock_carry.platform_of("torch==2.13.0 --hash=sha256:" + "0" * 64)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("torch", True),
        ("triton", True),
        ("nvidia-nccl-cu13", True),
        ("cuda-bindings", True),
        ("jax", True),
        ("jaxlib", True),
        ("jax-cuda13-plugin", True),
        ("megatron-core", False),
        ("deepspeed", False),
        ("torchtitan", False),
        ("optax", False),
    ],
)
def test_only_the_cuda_stack_is_left_to_the_machine(name: str, kept: bool) -> None:
    assert lock_carry.machine_keeps(lock_carry.Pin(name, "1", ())) is kept


def test_a_case_without_a_lock_for_the_target_is_named() -> None:
    with pytest.raises(lock_carry.CarryError, match="no gpu-plan9-x86_64 lock for pytorch/fsdp"):
        lock_carry.lock_path("pytorch/fsdp", "gpu-plan9-x86_64")


def test_the_record_says_what_matches_what_differs_and_what_is_missing(tmp_path: Path) -> None:
    # This Python has the lab's CPU torch and numpy; the manifest says numpy was carried.
    manifest = {"pytorch/fsdp": {"carried": ["numpy==2.4.6"], "machine": []}}
    result = lock_carry.record("pytorch/fsdp", TARGET, manifest)
    rows = {row["package"]: row for row in result["packages"]}
    assert rows["numpy"]["source"] == "carried" and rows["torch"]["source"] == "machine"
    assert rows["torch"]["found"] is not None
    assert rows["nvidia-nccl-cu13"]["found"] is None and "nvidia-nccl-cu13" in result["missing"]
    for row in rows.values():
        expected = row["found"] is not None and row["found"].split("+")[0] == row["lock"]
        assert row["matches"] is expected
    assert set(result["differ"]) == {
        name for name, row in rows.items() if row["found"] is not None and not row["matches"]
    }


def test_pins_prints_the_carried_list_and_refuses_an_unknown_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = {"megatron/gpt": {"carried": ["megatron-core==0.16.1", "packaging==26.4"], "machine": []}}
    (tmp_path / f"carry-{TARGET}.json").write_text(json.dumps(manifest))
    assert lock_carry.main(["pins", "--wheels", str(tmp_path), "megatron/gpt"]) == 0
    assert capsys.readouterr().out.split() == ["megatron-core==0.16.1", "packaging==26.4"]
    assert lock_carry.main(["pins", "--wheels", str(tmp_path), "jax/llama"]) == 2
    assert "jax/llama" in capsys.readouterr().err
