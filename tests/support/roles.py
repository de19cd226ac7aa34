"""Role variables rendered in process, the way a play resolves them (for the role unit tests).

Only Debian 12 runs in the lab, so the other systems' paths are checked by what a role resolves for their
facts: the role's own data (defaults, vars/main.yml, the vars file its first_found list picks, the set_fact of
tasks/os_vars.yml, the asserts of tasks/validate.yml) rendered with Ansible's templar, in process (a playbook
per case costs seconds). The test directory's conftest has pointed the plugin loader here first
(init_ansible_plugins). Also here: the shared inputs of those tests (a cluster node's variables, the
input-validation test pair each role's test file has).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .collection import REPO
from .stacks import current_stack

if TYPE_CHECKING:
    from ansible.template import Templar


def init_ansible_plugins() -> None:
    """Point Ansible's plugin loader at this checkout's collection (only the first call in a process counts).

    Unit tests that render role variables use Ansible's templar, whose collection loader is set up once per
    process: every unit-test directory that uses it calls this from its conftest, before its modules load.
    (The test cases' tests run in a process of their own: torch.compile cannot share one with Ansible.)
    """
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if getattr(_AnsibleCollectionFinder, "_trainstack_initialised", False):
        return
    init_plugin_loader([str(REPO / ".cache" / "collections")])
    _AnsibleCollectionFinder._trainstack_initialised = True


# (distribution, version, major version, family, architecture) of the systems the roles support.
OS_FACTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "x86_64"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "x86_64"),
    "ubuntu2404arm": ("Ubuntu", "24.04", "24", "Debian", "aarch64"),
    "debian12": ("Debian", "12.12", "12", "Debian", "x86_64"),
    "al2023": ("Amazon", "2023", "2023", "RedHat", "x86_64"),
}


def trust_role_data(value: object) -> object:
    """Mark role data as trusted templates, as Ansible does for files it loads from a role."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trust_role_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trust_role_data(v) for v in value]
    return value


def host_facts(os_key: str) -> dict:
    """ansible_facts of a cloud host running one of OS_FACTS' systems."""
    distro, version, major, family, arch = OS_FACTS[os_key]
    return {
        "distribution": distro,
        "distribution_version": version,
        "distribution_major_version": major,
        "os_family": family,
        "architecture": arch,
        "kernel": "6.8.0-1015-aws",
        "memtotal_mb": 65536,
        "processor_vcpus": 8,
        "virtualization_role": "host",
        "virtualization_type": "kvm",
    }


def _yaml_or_empty(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


def _os_vars_file(role: Path, templar: Templar) -> Path:
    """The role's own first_found list (tasks/os_vars.yml) rendered for these facts: first file found."""
    from ansible.template import trust_as_template

    task = yaml.safe_load((role / "tasks" / "os_vars.yml").read_text())[0]
    candidates = next(iter(task["vars"].values()))["files"]
    for candidate in candidates:
        path = role / "vars" / templar.template(trust_as_template(candidate))
        if path.exists():
            return path
    raise AssertionError(f"{role.name}: no vars file among {candidates}")


def role_templar(
    role_name: str, os_key: str, variables: dict | None = None, *, play_stack: bool = True
) -> Templar:
    """Variables as a play sees them after os_vars.yml: defaults < role vars < OS vars < case.

    With play_stack the stack comes from the play, as playbooks/build_image.yml hands it to the roles (parsed
    once); without it the role reads the collection's stacks/<id>.yml itself.
    """
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    role = REPO / "roles" / role_name
    base = {"ansible_facts": host_facts(os_key), "role_path": str(role), "inventory_hostname": "case"}
    if play_stack:
        rules = yaml.safe_load((REPO / "stacks" / "rules.yml").read_text())["rules"]
        base.update(trainstack_stack=current_stack(), trainstack_stack_rules=rules)
    merged = {
        **trust_role_data(_yaml_or_empty(role / "defaults" / "main.yml")),
        **trust_role_data(_yaml_or_empty(role / "vars" / "main.yml")),
        **base,
    }
    templar = Templar(loader=DataLoader(), variables=merged)
    merged.update(trust_role_data(_yaml_or_empty(_os_vars_file(role, templar))))
    merged.update(trust_role_data(variables or {}))
    templar = Templar(loader=DataLoader(), variables=merged)
    # The rest of os_vars.yml: the set_fact that resolves the stack once for the host.
    for task in yaml.safe_load((role / "tasks" / "os_vars.yml").read_text())[1:]:
        facts = task.get("ansible.builtin.set_fact") or {}
        merged.update({k: templar.template(trust_as_template(v)) for k, v in facts.items()})
    return Templar(loader=DataLoader(), variables=merged)


def resolve_role_vars(role_name: str, os_key: str, names: list[str], *, play_stack: bool = True) -> dict:
    """The values of these variables as the role resolves them for a host of this system."""
    from ansible.template import trust_as_template

    templar = role_templar(role_name, os_key, play_stack=play_stack)
    return {name: templar.template(trust_as_template("{{ " + name + " }}")) for name in names}


def role_validation_failure(role_name: str, os_key: str, variables: dict) -> str | None:
    """Run the assert tasks of the role's tasks/validate.yml; the first failing one's fail_msg, or None."""
    templar = role_templar(role_name, os_key, variables)
    for task in yaml.safe_load((REPO / "roles" / role_name / "tasks" / "validate.yml").read_text()):
        if "ansible.builtin.assert" in task:
            message = assert_task_failure(templar, task)
            if message is not None:
                return message
    return None


def role_task(role_name: str, tasks_file: str, task_name: str) -> dict:
    """One task of a role's tasks file, by its name."""
    tasks = yaml.safe_load((REPO / "roles" / role_name / "tasks" / tasks_file).read_text())
    return next(task for task in tasks if task["name"] == task_name)


def assert_task_failure(templar: Templar, task: dict) -> str | None:
    """Evaluate an assert task as Ansible would, with its own vars: its fail_msg when a condition fails."""
    from ansible.template import trust_as_template

    scoped = templar.copy_with_new_env(
        available_variables={**templar.available_variables, **trust_role_data(task.get("vars") or {})}
    )
    spec = task["ansible.builtin.assert"]
    conditions = spec["that"] if isinstance(spec["that"], list) else [spec["that"]]
    if all(scoped.evaluate_conditional(trust_as_template(str(c))) for c in conditions):
        return None
    return str(scoped.template(trust_as_template(spec["fail_msg"])))


def role_data_templar(role_name: str, *, os_vars: str | None = None, **variables: object) -> Templar:
    """A play's view of a role's data without facts-driven lookups: defaults < vars/main.yml <
    vars/<os_vars>.yml < the case's variables (as inventory or extra vars)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    root = REPO / "roles" / role_name
    merged = {
        **trust_role_data(_yaml_or_empty(root / "defaults" / "main.yml")),
        **trust_role_data(_yaml_or_empty(root / "vars" / "main.yml")),
        **trust_role_data(_yaml_or_empty(root / "vars" / f"{os_vars}.yml") if os_vars else {}),
        "ansible_managed": "managed by a test",
        "role_path": str(root),
        **trust_role_data(variables),
    }
    return Templar(loader=DataLoader(), variables=merged)


def render_role_template(templar: Templar, role_name: str, name: str) -> str:
    """One of the role's templates/ rendered with these variables."""
    from ansible.template import trust_as_template

    return str(
        templar.template(trust_as_template((REPO / "roles" / role_name / "templates" / name).read_text()))
    )


def template_value(templar: Templar, expression: str) -> object:
    """What a Jinja expression evaluates to with these variables."""
    from ansible.template import trust_as_template

    return templar.template(trust_as_template("{{ " + expression + " }}"))


# A node of a two-node cluster, for the roles that bind or scrape the cluster address (monitoring, dcgm).
CLUSTER_NODE = "10.0.3.17"
CLUSTER_NODE_VARS = {
    "ansible_facts": {
        "distribution": "Debian",
        "distribution_version": "12.12",
        "distribution_major_version": "12",
        "os_family": "Debian",
        "architecture": "x86_64",
        "default_ipv4": {"address": CLUSTER_NODE},
        "all_ipv4_addresses": [CLUSTER_NODE, "172.17.0.1"],
    },
    "inventory_hostname": "gpu1",
    "groups": {"all": ["gpu1", "gpu2"]},
    "hostvars": {"gpu1": {"ansible_host": CLUSTER_NODE}, "gpu2": {"ansible_host": "10.0.3.18"}},
}
# A listen address on every interface (':PORT', '0.0.0.0:PORT', '[::]:PORT') for one of the exporters' ports.
WILDCARD_LISTENER = re.compile(r"(^|[\s=])(0\.0\.0\.0|\[::\]|::)?:(9090|9100|9400|9716|9717)\b")


def no_wildcard_listener(text: str) -> bool:
    """No listen address on every interface in a rendered file."""
    return WILDCARD_LISTENER.search(text) is None


def case_params(cases: list[tuple]) -> list:
    """pytest parameters from table rows (case id, *values), each shown under its case id."""
    import pytest

    return [pytest.param(*case[1:], id=case[0]) for case in cases]


def input_validation_tests(role_name: str, bad: list[tuple], good: list[tuple]) -> tuple:
    """The two input tests a role's test file has: each bad input is refused with a message naming the
    variable (the case's fragment), each good input passes. Assign the pair to module-level `test_*` names."""
    import pytest

    @pytest.mark.parametrize(("os_key", "variables", "fragment"), case_params(bad))
    def refused(os_key: str, variables: dict, fragment: str) -> None:
        message = role_validation_failure(role_name, os_key, variables)
        assert message is not None and fragment in message

    @pytest.mark.parametrize(("os_key", "variables"), case_params(good))
    def accepted(os_key: str, variables: dict) -> None:
        assert role_validation_failure(role_name, os_key, variables) is None

    return refused, accepted
