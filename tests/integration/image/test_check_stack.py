"""`make check-stack` / playbooks/check_stack.yml: shipped stacks pass, a broken stack is refused with the
rule and its source, an unknown stack id is refused naming the ones that exist."""

import shutil

import pytest
import yaml

from tests.support import REPO, VENV_BIN, run


def check(stack_id, stacks_dir=None):
    extra = ["-e", f"check_stack_dir={stacks_dir}"] if stacks_dir else []
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "playbooks/check_stack.yml",
            "-e",
            f"trainstack_stack={stack_id}",
            *extra,
        ],
        check=False,
    )


@pytest.mark.parametrize("stack_id", ["ts-2026.10", "ts-2025.12"])
def test_make_check_stack_passes_shipped_stacks(stack_id):
    proc = run(["make", "-s", "check-stack", f"STACK={stack_id}"], check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"stack {stack_id}: OK" in proc.stdout


def test_broken_stack_is_refused_with_rule_and_citation(tmp_path):
    stacks = tmp_path / "stacks"
    shutil.copytree(REPO / "stacks", stacks)
    data = yaml.safe_load((stacks / "ts-2026.10.yml").read_text())
    data["id"] = "ts-broken"
    data["components"]["nvidia_driver"]["version"] = "570.172.08"
    (stacks / "ts-broken.yml").write_text(yaml.safe_dump(data))
    proc = check("ts-broken", stacks)
    assert proc.returncode != 0
    assert "stack ts-broken is rejected" in proc.stdout
    assert "[cuda-driver-minimum]" in proc.stdout
    assert "570.172.08 is too old for cuda.version 13.2: needs >= 580.65.06" in proc.stdout
    assert "https://docs.nvidia.com/deploy/cuda-compatibility/" in proc.stdout


def test_unknown_stack_id_names_the_available_ones():
    proc = check("ts-1999.01")
    assert proc.returncode != 0
    assert "trainstack_stack=ts-1999.01: no such stack" in proc.stdout
    assert "ts-2026.10" in proc.stdout and "ts-2025.12" in proc.stdout


def test_misspelt_key_is_refused_naming_file_and_key(tmp_path):
    """The schema runs before any rule: a misspelt key fails with the file and the key's dotted path."""
    stacks = tmp_path / "stacks"
    shutil.copytree(REPO / "stacks", stacks)
    path = stacks / "ts-2026.10.yml"
    path.write_text(path.read_text().replace("    kernel_modules: open", "    kernel_module: open", 1))
    proc = check("ts-2026.10", stacks)
    assert proc.returncode != 0
    assert (
        f"{path}: components.nvidia_driver.kernel_module: unknown key (did you mean 'kernel_modules'?)"
        in proc.stdout
    )
    assert "stack ts-2026.10: OK" not in proc.stdout
