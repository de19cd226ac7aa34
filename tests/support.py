"""Shared test helpers: where the repository, its venv and the lab live; how to run the collection."""

from __future__ import annotations

import contextlib
import fcntl
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

# The lab's and moto's helpers are product code, shared with the benchmarks (bench/support); re-exported here
# so that a test finds every helper in one place.
from bench.support.lab import LAB_KEY, LAB_SSH, VENV_BIN, ansible_env
from bench.support.moto import MOTO_KEYS, MotoServer, free_port, start_moto

# The names above that tests import from here (the rest of this module's names are its own).
REEXPORTED = (LAB_KEY, LAB_SSH, VENV_BIN, ansible_env, MOTO_KEYS, MotoServer, free_port, start_moto)

if TYPE_CHECKING:
    from ansible.template import Templar

REPO = Path(__file__).resolve().parents[1]
# Held by the process that runs the own_nodes tests beside the lab's own tests (make integration-own-nodes):
# the lab's teardown takes it first, so that it never removes the bridge under their nodes.
OWN_NODES_LOCK = REPO / ".cache" / "own-nodes.lock"


def run(
    cmd: list[str], *, check: bool = True, timeout: int = 900, **kw: object
) -> subprocess.CompletedProcess:
    """Run a command from the repository root with the Ansible environment, capturing text output."""
    kw.setdefault("env", ansible_env())
    kw.setdefault("cwd", REPO)
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


def link_exists(name: str) -> bool:
    """Whether the host has a network link of that name (the lab's bridge, for one)."""
    shown = subprocess.run(["ip", "link", "show", "dev", name], capture_output=True, check=False)
    return shown.returncode == 0


@contextlib.contextmanager
def own_nodes_done() -> Iterator[None]:
    """Wait until a process running the own_nodes tests beside this one has ended (at once when none runs)."""
    OWN_NODES_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with OWN_NODES_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def playbook(name: str, *args: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess:
    """Run one of the collection's playbooks by its FQCN."""
    return run([str(VENV_BIN / "ansible-playbook"), f"trainstack.cluster.{name}", *args], check=check, **kw)


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


def lab_ssh(address: str, *command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a command on a lab node over SSH and return the finished process (text output, never raises)."""
    return subprocess.run(
        [*LAB_SSH, f"root@{address}", *command], capture_output=True, text=True, timeout=timeout, check=False
    )


def on_lab_node(command: str, address: str = "10.77.0.11", *, check: bool = True) -> str:
    """Run a shell command on a lab node (the head node by default) over SSH with the lab key, as users do."""
    proc = lab_ssh(address, command)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command!r} on {address} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass
class LabNodeState:
    """What a test that configures a lab node in place found there first: which of the paths it may create
    existed, and which of the packages it may install were installed."""

    paths: set[str]
    packages: set[str]


def lab_node_state(address: str, paths: list[str], packages: tuple[str, ...]) -> LabNodeState:
    """Record which of ``paths`` exist and which of ``packages`` are installed on a lab node."""
    quoted = " ".join(shlex.quote(path) for path in paths)
    existing = on_lab_node(f"for p in {quoted}; do [ -e $p ] && echo $p; done; true", address).split()
    query = f"dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {' '.join(packages)} 2>/dev/null; true"
    installed = {
        line.split()[0] for line in on_lab_node(query, address).splitlines() if line.split()[1:2] == ["ii"]
    }
    return LabNodeState(set(existing), installed)


# The EFA textfile exporter's units, which the monitoring role of a node bootstrap installs.
EFA_EXPORTER_UNITS = ("trainstack-efa-exporter.service", "trainstack-efa-exporter.timer")


def restore_lab_node(
    address: str, before: LabNodeState, created: list[str], parents: list[str], packages: tuple[str, ...]
) -> None:
    """Remove what a node bootstrap added to a lab node (the ``created`` paths, the ``parents`` left empty,
    the ``packages``) that ``before`` did not have, so the lab's other tests find the node as it was."""
    new_paths = [path for path in created if path not in before.paths]
    if any(path.endswith("/trainstack-efa-exporter.timer") for path in new_paths):
        on_lab_node(f"systemctl disable --now {' '.join(EFA_EXPORTER_UNITS)}", address, check=False)
    if new_paths:
        on_lab_node("rm -rf " + " ".join(shlex.quote(path) for path in new_paths), address, check=False)
    new_parents = [path for path in parents if path not in before.paths]
    if new_parents:
        on_lab_node("rmdir --ignore-fail-on-non-empty " + " ".join(new_parents), address, check=False)
    new_packages = sorted(set(packages) - before.packages)
    if new_packages:
        on_lab_node(
            "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(new_packages) + " >/dev/null",
            address,
            check=False,
        )
    # A timer run the stop cut short leaves the unit failed, and a failed unit leaves the node "degraded".
    on_lab_node(
        f"systemctl daemon-reload; systemctl reset-failed {' '.join(EFA_EXPORTER_UNITS)} 2>/dev/null; true",
        address,
        check=False,
    )


def published_sha256(deb: Path) -> str | None:
    """The sha256 Debian's signed package index publishes for this .deb (apt-cache show), if any."""
    import urllib.parse

    name, version, _ = urllib.parse.unquote(deb.name).rsplit("_", 2)
    out = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", f"{name}={version}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return next((line.split()[1] for line in out.splitlines() if line.startswith("SHA256: ")), None)


def real_debian_debs(scratch: Path) -> list[tuple[Path, str | None]]:
    """Two real Debian packages with their published sha256: the download tests' real files.

    Taken from apt's cache when two there match their index entry, else fetched into ``scratch`` with
    `apt-get download` (Debian mirrors are reachable).
    """
    import hashlib

    found = []
    for deb in sorted(Path("/var/cache/apt/archives").glob("*.deb"), key=lambda p: p.stat().st_size)[:40]:
        digest = published_sha256(deb)
        if digest and hashlib.sha256(deb.read_bytes()).hexdigest() == digest:
            found.append((deb, digest))
        if len(found) == 2:
            return found
    subprocess.run(["apt-get", "download", "hello", "sl"], cwd=scratch, check=True, capture_output=True)
    return [(deb, published_sha256(deb)) for deb in sorted(scratch.glob("*.deb"))]


@contextlib.contextmanager
def serve_directory(root: Path, host: str = "127.0.0.1") -> Iterator[tuple[str, list[str]]]:
    """Serve ``root`` over HTTP (a stand-in download host); yields (base_url, requested paths).

    On loopback by default; ``host`` binds another address, such as the lab bridge's for lab nodes to fetch
    from.
    """
    import functools
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer((host, 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}", requests
    finally:
        server.shutdown()


# ------------------------------------------------------------------ moto, the AWS stand-in
# Tests that talk to AWS talk to a real moto HTTP server in a child process (one per test module or session),
# started by start_moto (bench/support/moto.py, re-exported above).


def moto_aws_env(url: str, **extra: str) -> dict[str, str]:
    """Environment for ansible-* commands whose AWS calls go to moto at ``url``: no host AWS config or
    instance metadata, test keys, and AWS_ENDPOINT_URL (botocore sends every service there)."""
    env = {k: v for k, v in ansible_env().items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent/aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=url,
        **MOTO_KEYS,
    )
    env.update(extra)
    return env


# Test components: `make test-<component>` selects its tests with `pytest -m <component>`. A role's tests are
# tests/unit/roles/test_<role>.py (or test_<role>_<aspect>.py): they get the marker role_<role> and their
# role's component. Other tests get the component their directory is named for (DIRECTORY_COMPONENTS).
# Every role is in exactly one component (a unit test checks), so a new role's tests are selected at once.
COMPONENT_ROLES: dict[str, tuple[str, ...]] = {
    "foundation": ("artifact", "base", "lab"),
    "slurm": ("munge", "slurm", "slurm_accounting", "ldap_server", "sssd_client", "cluster_users"),
    "nvidia": ("container_runtime", "cuda", "dcgm", "gdrcopy", "nccl", "nvidia_driver"),
    "fabric": ("aws_ofi_nccl", "efa", "enroot_pyxis", "lustre_client", "nccl_tests", "nvme_scratch"),
    "image": ("image_manifest", "image_prepare", "image_selfcheck", "pytorch"),
    "validation": ("monitoring", "node_health"),
    "launch": ("training_job",),
    "aws": ("aws_foundation", "ecs_agent", "pcs_agent"),
}
ROLE_COMPONENT = {role: component for component, roles in COMPONENT_ROLES.items() for role in roles}
# Directories below tests/ (as posix paths) whose tests all belong to one component.
DIRECTORY_COMPONENTS = {
    "unit/image": "image",
    "unit/validation": "validation",
    "unit/plugins/inventory": "inventory",
    "unit/stacks": "stacks",
    "unit/testcases": "testcases",
    "gpu": "testcases",
    **{f"integration/{name}": name for name in (*COMPONENT_ROLES, "inventory")},
}


def role_of_test_file(path: Path) -> str | None:
    """The role a file under tests/unit/roles is named for (the longest role name that fits), if any."""
    if path.parent != REPO / "tests" / "unit" / "roles":
        return None
    stem = path.stem.removeprefix("test_")
    fitting = [role for role in ROLE_COMPONENT if stem == role or stem.startswith(f"{role}_")]
    return max(fitting, key=len, default=None)


def markers_for_test_file(path: Path) -> list[str]:
    """The component and role markers a test file gets from where it is and what it is named."""
    role = role_of_test_file(path)
    if role is not None:
        return [ROLE_COMPONENT[role], f"role_{role}"]
    relative = path.relative_to(REPO / "tests").as_posix()
    return [
        component
        for directory, component in DIRECTORY_COMPONENTS.items()
        if relative.startswith(f"{directory}/")
    ][:1]


# ------------------------------------------------------------------ role variables, rendered in process
# Only Debian 12 runs in the lab, so the other systems' paths are checked by what a role resolves for their
# facts: the role's own data (defaults, vars/main.yml, the vars file its first_found list picks, the set_fact
# of tasks/os_vars.yml, the asserts of tasks/validate.yml) rendered with Ansible's templar, in process (a
# playbook per case costs seconds). The test directory's conftest has pointed the plugin loader here first.
CURRENT_STACK_FILE = REPO / "stacks" / f"{(REPO / 'stacks' / 'current').read_text().strip()}.yml"
# (distribution, version, major version, family, architecture) of the systems the roles support.
OS_FACTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "x86_64"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "x86_64"),
    "ubuntu2404arm": ("Ubuntu", "24.04", "24", "Debian", "aarch64"),
    "debian12": ("Debian", "12.12", "12", "Debian", "x86_64"),
    "al2023": ("Amazon", "2023", "2023", "RedHat", "x86_64"),
}


def current_stack() -> dict:
    """The stack the roles are tested against, parsed."""
    return yaml.safe_load(CURRENT_STACK_FILE.read_text())


def stack_artifact(component: str, arch: str = "x86_64") -> dict:
    """The current stack's first artifact of a component for one architecture."""
    arts = current_stack()["components"][component]["artifacts"]
    return next(a for a in arts if a.get("arch", arch) == arch)


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


# ------------------------------------------------------------------ NVIDIA roles' variables, per OS
# Only Debian 12 runs in the lab; Ubuntu 22.04/24.04 and Amazon Linux 2023 paths are checked by what the
# roles resolve for hosts with those facts (repository URLs, package specs, paths, flavour and fabric-manager
# choices).
NVIDIA_ROLES = ["nvidia_driver", "cuda", "nccl", "gdrcopy", "dcgm", "container_runtime"]
# name: (distribution, version, major, os_family, release, architecture, instance family)
NVIDIA_HOSTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "jammy", "x86_64", "p6-b200"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "noble", "aarch64", "p5"),
    "amzn2023": ("Amazon", "2023", "2023", "RedHat", "", "x86_64", "g6e"),
    "debian12": ("Debian", "12", "12", "Debian", "bookworm", "x86_64", ""),
}

NVIDIA_FACT_KEYS = [
    "distribution",
    "distribution_version",
    "distribution_major_version",
    "os_family",
    "distribution_release",
    "architecture",
]
NVIDIA_RESOLVED = {
    "driver_version": "{{ nvidia_driver_version }}",
    "driver_source": "{{ __nvidia_driver_source }}",
    "driver_flavour": "{{ __nvidia_driver_flavour }}",
    "driver_packages": "{{ __nvidia_driver_packages }}",
    "driver_fabricmanager": "{{ __nvidia_driver_use_fabricmanager | bool }}",
    "driver_nvlsm": "{{ __nvidia_driver_use_nvlsm | bool }}",
    "driver_hold": "{{ __nvidia_driver_hold_method }}",
    "driver_headers": "{{ __nvidia_driver_headers_package }}",
    "cuda_versions": "{{ cuda_versions }}",
    "cuda_packages": "{{ __cuda_packages }}",
    "cuda_repo": "{{ __cuda_repo_effective_url }}",
    "cuda_key": "{{ __cuda_repo_effective_key_url }}",
    "nccl_version": "{{ nccl_version }}",
    "nccl_artifacts": "{{ nccl_artifacts | map(attribute='url') | list }}",
    "nccl_repo_packages": "{{ __nccl_repo_packages | map('replace', '{version}', nccl_version)"
    " | map('replace', '{cuda}', nccl_repo_cuda_version) | list }}",
    "nccl_repo_lib_dir": "{{ __nccl_repo_lib_dir }}",
    "gdrcopy_version": "{{ gdrcopy_version }}",
    "gdrcopy_headers": "{{ __gdrcopy_headers_package }}",
    "dcgm_version": "{{ dcgm_version }}",
    "dcgm_spec": "{{ __dcgm_version_spec }}",
    "toolkit_version": "{{ container_runtime_toolkit_version }}",
    "toolkit_repo": "{{ __container_runtime_repo_effective_url }}",
    "toolkit_spec": "{{ __container_runtime_version_spec }}",
}


def nvidia_inventory(tmp: Path) -> Path:
    """An inventory of NVIDIA_NVIDIA_HOSTS, run locally, each with its stand-in facts and instance family."""
    hosts = {}
    for name, (distro, version, major, family, release, arch, instance) in NVIDIA_HOSTS.items():
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python"),
            "fake_facts": {
                "distribution": distro,
                "distribution_version": version,
                "distribution_major_version": major,
                "os_family": family,
                "distribution_release": release,
                "architecture": arch,
            },
            "nvidia_driver_instance_family": instance,
        }
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def _nvidia_resolve_playbook(tmp: Path) -> Path:
    play = {
        "name": "Resolve the NVIDIA roles' variables",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Fake facts",
                "ansible.builtin.set_fact": {
                    "cacheable": True,
                    **{key: f"{{{{ fake_facts.{key} }}}}" for key in NVIDIA_FACT_KEYS},
                },
            },
            {
                "name": "Load OS vars",
                "ansible.builtin.include_role": {
                    "name": "trainstack.cluster.{{ item }}",
                    "tasks_from": "os_vars",
                    "public": True,
                },
                "loop": NVIDIA_ROLES,
            },
            {
                "name": "Write",
                "ansible.builtin.copy": {
                    "content": "{{ resolved | to_json }}",
                    "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json",
                    "mode": "0644",
                },
                "vars": {"resolved": NVIDIA_RESOLVED},
            },
        ],
    }
    path = tmp / "resolve.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def resolve_nvidia_roles(tmp: Path) -> dict[str, dict]:
    """Every NVIDIA_HOSTS host's NVIDIA_RESOLVED values: one ansible-playbook run loads every NVIDIA role's OS
    vars (first_found, as the roles do) for hosts whose facts are set to the systems the roles support."""
    import json

    playbook_path = _nvidia_resolve_playbook(tmp)
    run([str(VENV_BIN / "ansible-playbook"), "-i", str(nvidia_inventory(tmp)), str(playbook_path)])
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in NVIDIA_HOSTS}


def nvidia_role_refusal(tmp_path: Path, role: str, entry: str, extra: dict) -> subprocess.CompletedProcess:
    """One NVIDIA role's entry point in --check on the Debian 12 host with these variables (a bad input must
    stop it at its checks, before any change)."""
    tasks = [
        {
            "name": "Fake facts",
            "ansible.builtin.set_fact": {
                "cacheable": True,
                **{k: f"{{{{ fake_facts.{k} }}}}" for k in NVIDIA_FACT_KEYS},
            },
        },
    ]
    if entry == "validate":
        tasks.append(
            {
                "name": "OS vars",
                "ansible.builtin.include_role": {
                    "name": f"trainstack.cluster.{role}",
                    "tasks_from": "os_vars",
                },
            }
        )
    tasks.append(
        {
            "name": "Role",
            "ansible.builtin.include_role": {"name": f"trainstack.cluster.{role}", "tasks_from": entry},
        }
    )
    play = {"name": "Bad input", "hosts": "debian12", "gather_facts": False, "vars": extra, "tasks": tasks}
    playbook = tmp_path / "bad.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "--check",
            "-i",
            str(nvidia_inventory(tmp_path)),
            str(playbook),
        ],
        check=False,
    )


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


# ------------------------------------------------------------------ Kubernetes manifests, offline
# No API server here: a rendered PyTorchJob is held to the Kubeflow training SDK's generated models of
# kubeflow.org/v1 (every field name and type) and each replica's pod to kubernetes-validate's JSON schemas of
# Kubernetes (strict: an unknown field fails). Both packages are pinned in requirements-launch.txt.
KUBERNETES_SCHEMA_VERSION = "1.30.0"


def _api_model(name: str) -> type:
    import kubernetes.client.models as k8s_models
    from kubeflow.training import models as kf_models

    return getattr(kf_models, name, None) or getattr(k8s_models, name)


def api_model_problems(value: object, type_name: str, path: str = "$") -> list[str]:
    """Where `value` leaves the generated API model `type_name`: unknown fields and wrong types, by path."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [
            p
            for i, item in enumerate(value)
            for p in api_model_problems(item, type_name[5:-1], f"{path}[{i}]")
        ]
    if type_name.startswith("dict("):
        inner = re.match(r"dict\(str, (.+)\)", type_name).group(1)
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping"]
        return [p for key, item in value.items() for p in api_model_problems(item, inner, f"{path}.{key}")]
    if type_name in ("str", "int", "bool", "float", "object", "datetime"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}.get(type_name, object)
        return [] if isinstance(value, expected) else [f"{path}: expected {type_name}, got {value!r}"]
    model = _api_model(type_name)
    if not isinstance(value, dict):
        return [f"{path}: expected a {type_name} mapping"]
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = [f"{path}: {type_name} has no field {key!r}" for key in sorted(set(value) - set(by_json))]
    for key, item in value.items():
        if key in by_json:
            found += api_model_problems(item, model.openapi_types[by_json[key]], f"{path}.{key}")
    return found


def pytorchjob_problems(manifest: dict) -> list[str]:
    """Every reason the Kubeflow API models or Kubernetes' pod schema would refuse this PyTorchJob."""
    import kubernetes_validate

    found = api_model_problems(manifest, "KubeflowOrgV1PyTorchJob")
    for role, replica in (manifest.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
        template = replica.get("template") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x", **(template.get("metadata") or {})},
            "spec": template.get("spec"),
        }
        try:
            kubernetes_validate.validate(pod, KUBERNETES_SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            found.append(f"{role} pod: {error.message}")
    return found


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll every 2 s until predicate() holds; fail naming what was awaited (lab state takes time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
