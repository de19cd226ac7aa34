"""training_job builds a test case's virtualenv only from its lock (requirements.lock, hash-pinned): a launch
that would build one is refused, naming the file and the command that makes it, when the lock is missing or
does not hold the manifest's pins; the virtualenv is named by the lock's content. Rendered by Ansible's own
templar from the role's defaults and vars, against the real catalog and against a copy with the lock changed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.trainstack.cluster.plugins.module_utils.launch.plan import lock_pins

from tests.support import REPO

from .test_training_job_inputs import role_vars

ROLE = REPO / "roles" / "training_job"


def render(expression: str, catalog: Path | None = None, **overrides: Any) -> Any:
    """``expression`` with the role's variables for pytorch/ddp, the catalog at ``catalog`` if given."""
    given = {"__training_job_catalog": str(catalog)} if catalog is not None else {}
    variables = role_vars("pytorch/ddp", **overrides, **given)
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def request_failures(catalog: Path | None = None, **overrides: Any) -> list[str]:
    given = {"__training_job_catalog": str(catalog)} if catalog is not None else {}
    return role_vars("pytorch/ddp", **overrides, **given)["__training_job_problems"]["request"]


def catalog_copy(tmp_path: Path) -> Path:
    """A copy of pytorch/ddp's directory (and the library its manifest includes) as a catalog of its own,
    whose lock a test may change."""
    catalog = tmp_path / "testcases"
    shutil.copytree(REPO / "testcases" / "pytorch" / "ddp", catalog / "pytorch" / "ddp")
    shutil.copytree(REPO / "testcases" / "common", catalog / "common")
    return catalog


def test_the_real_lock_passes_and_names_the_virtualenv() -> None:
    assert request_failures() == []
    lock = (REPO / "testcases" / "pytorch" / "ddp" / "requirements.lock").read_text()
    assert render("{{ __training_job_plan.lock }}") == lock
    assert "torch==2.13.0" in lock_pins(lock)


def test_a_missing_lock_is_refused_naming_the_file_and_the_command(tmp_path: Path) -> None:
    catalog = catalog_copy(tmp_path)
    (catalog / "pytorch" / "ddp" / "requirements.lock").unlink()
    (message,) = request_failures(catalog)
    assert f"from {catalog / 'pytorch' / 'ddp' / 'requirements.lock'}, which does not exist" in message
    assert "Make it with `make testcase-locks`" in message
    # Launches that build no virtualenv do not need it.
    assert request_failures(catalog, training_job_venv=False) == []
    assert request_failures(catalog, training_job_launcher="kubernetes") == []


def test_a_lock_without_the_manifest_pin_is_refused(tmp_path: Path) -> None:
    catalog = catalog_copy(tmp_path)
    lock = catalog / "pytorch" / "ddp" / "requirements.lock"
    lock.write_text(lock.read_text().replace("torch==2.13.0+cpu", "torch==2.12.0+cpu"))
    (message,) = request_failures(catalog)
    assert message.startswith(f"{lock} does not hold the manifest's pin(s) torch==2.13.0")
    assert "`make testcase-locks`" in message


def test_the_virtualenv_key_follows_the_lock(tmp_path: Path) -> None:
    catalog = catalog_copy(tmp_path)
    key = "{{ __training_job_plan.venv_key }}"
    real = render(key)
    assert render(key, catalog) == real  # same content, same virtualenv
    lock = catalog / "pytorch" / "ddp" / "requirements.lock"
    lock.write_text(lock.read_text() + f"extra==1.0 --hash=sha256:{'0' * 64}\n")
    assert render(key, catalog) != real
    assert render(key, training_job_python="/usr/bin/python3.12") != real


def test_the_install_task_uses_the_staged_lock_with_hashes() -> None:
    stage = DataLoader().load_from_file(str(ROLE / "tasks" / "stage-missing.yml"), trusted_as_template=True)
    block = next(task for task in stage if task.get("name") == "Build the test case's virtualenv")["block"]
    install = next(task for task in block if task["name"] == "Install the locked requirements")
    argv = render(install["ansible.builtin.command"]["argv"], training_job_wheelhouse="/wheels")
    assert "--require-hashes" in argv and "--no-index" in argv
    assert argv[-2:] == ["-r", render("{{ __training_job_plan.payload }}/requirements.lock")]
    gpu = {"training_job_instance_type": "p5.48xlarge", "training_job_node_os": "amzn-2023"}
    argv = render(install["ansible.builtin.command"]["argv"], **gpu)
    assert argv[-1] == render("{{ __training_job_plan.payload }}/requirements.gpu-amzn-2023-x86_64.lock")


def test_a_gpu_instance_type_takes_the_lock_of_its_os_and_architecture() -> None:
    gpu = {"training_job_instance_type": "p5.48xlarge", "training_job_node_os": "ubuntu-24.04"}
    assert request_failures(**gpu) == []
    lock = REPO / "testcases" / "pytorch" / "ddp" / "requirements.gpu-ubuntu-24.04-x86_64.lock"
    assert render("{{ __training_job_plan.lock }}", **gpu) == lock.read_text()
    assert render("{{ __training_job_plan.target }}", **gpu) == "gpu-ubuntu-24.04-x86_64"
    # The lab's lock (torch's CPU build) is no longer what a GPU node gets, so nothing tells it to leave it.
    (message,) = request_failures(training_job_instance_type="p5.48xlarge")
    assert "but their OS is unknown: set training_job_node_os" in message
    assert request_failures(training_job_instance_type="p5.48xlarge", training_job_venv=False) == []
