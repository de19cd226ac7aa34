"""The collection builds, installs from its tarball with no Galaxy server, and its playbooks run by FQCN; its
metadata (dependencies, supported ansible-core, links) and its filter documentation are honest."""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

from tests.support import LOCALHOST_ARGS, REPO, VENV_BIN, ansible_env, run


def _ansible_package_collections() -> str:
    """Where the `ansible` PyPI package keeps community.general, amazon.aws, ansible.posix and the rest."""
    site = next((VENV_BIN.parent / "lib").glob("python3*/site-packages"))
    return str(site)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection built from this checkout, as `ansible-galaxy collection build` makes it."""
    out = tmp_path_factory.mktemp("build")
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(REPO)])
    built = out / f"trainstack-cluster-{version}.tar.gz"
    assert built.is_file()
    return built


def _shipped(tarball: Path) -> set[str]:
    """Every path in the tarball."""
    with tarfile.open(tarball) as tar:
        return set(tar.getnames())


def _probe_paths(pattern: str) -> list[str]:
    """Paths that one .gitignore pattern ignores, as a used checkout holds them: a file for a name with a
    suffix or a wildcard, else a file inside a directory of that name; an unanchored pattern also one level
    down, where git applies it too."""
    name = pattern.strip("/").replace("**/", "").replace("*", "probe")
    probe = name if "*" in pattern or "." in Path(name).name.lstrip(".") else f"{name}/probe"
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    return [probe] if anchored else [probe, f"plugins/{probe}"]


def _local_outputs() -> list[str]:
    """One or two paths for each pattern of .gitignore: the virtualenv, caches, results/, the lab's state,
    built wheels and tarballs, whether or not this checkout holds them now."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.strip().startswith(("#", "!"))]
    return [path for pattern in patterns for path in _probe_paths(pattern)]


@pytest.fixture(scope="module")
def used_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout's tracked files with a file at every path .gitignore names, as a checkout that
    has run the lab, the tests and a build holds them (a fresh checkout holds none, so building it alone
    proves nothing about build_ignore)."""
    root = tmp_path_factory.mktemp("used") / "cluster"
    outputs = _local_outputs()
    for name in run(["git", "ls-files", "-z"]).stdout.split("\0"):
        # A tracked path where a local output goes (the virtualenv's link) makes way for it.
        if not name or not os.path.lexists(REPO / name) or any(o.startswith(f"{name}/") for o in outputs):
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name, follow_symlinks=False)
    for path in outputs:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("a local output\n", encoding="utf-8")
    # The probes must be what git ignores, or the test below would check nothing.
    run(["git", "init", "-q", str(root)])
    ignored = run(["git", "check-ignore", "--no-index", "--stdin"], cwd=root, input="\n".join(outputs))
    assert sorted(ignored.stdout.split()) == sorted(outputs), ignored.stdout
    shutil.rmtree(root / ".git")
    return root


def test_the_tarball_ships_no_local_output(used_checkout: Path, tmp_path: Path) -> None:
    """Nothing that git ignores (the virtualenv, caches, results/, the lab's state, built wheels and
    tarballs) is in the tarball of a checkout that holds all of it."""
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    galaxy = [str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path)]
    run([*galaxy, str(used_checkout)])
    names = _shipped(tmp_path / f"trainstack-cluster-{version}.tar.gz")
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "playbooks/ping.yml"} <= names
    leaked = sorted(path for path in _local_outputs() if path in names)
    assert leaked == [], f"shipped although git ignores them (add them to galaxy.yml build_ignore): {leaked}"
    candidates = sorted(n for n in names if n not in {"MANIFEST.json", "FILES.json"})
    ignored = run(["git", "check-ignore", "--no-index", "--stdin"], check=False, input="\n".join(candidates))
    assert ignored.stdout.split() == [], f"shipped although git ignores them: {ignored.stdout.split()}"


def test_an_execution_environment_gets_the_collections_requirements(tarball: Path, tmp_path: Path) -> None:
    """ansible-builder reads meta/execution-environment.yml from the installed collection and finds the
    controller's Python and system requirements in it."""
    installed = tmp_path / "collections"
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{installed}:{_ansible_package_collections()}")
    env.pop("ANSIBLE_CONFIG")
    galaxy = [str(VENV_BIN / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(installed)]
    run([*galaxy, str(tarball)], env=env)
    found = yaml.safe_load(run([str(VENV_BIN / "ansible-builder"), "introspect", str(installed)]).stdout)
    python = {line.split("#")[0].split(">=")[0].strip() for line in found["python"]}
    system = {line.split("#")[0].strip() for line in found["system"]}
    assert {"boto3", "botocore", "kubernetes"} <= python, found
    assert "openssh-client [platform:dpkg]" in system, found


def test_build_install_and_run_by_fqcn(tarball: Path, tmp_path: Path) -> None:
    installed = tmp_path / "collections"
    # --offline: dependencies resolve against what is installed (the ansible package), never a Galaxy server.
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{installed}:{_ansible_package_collections()}")
    env.pop("ANSIBLE_CONFIG")
    run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(installed),
            str(tarball),
        ],
        env=env,
    )
    manifest = installed / "ansible_collections" / "trainstack" / "cluster" / "MANIFEST.json"
    assert manifest.is_file()

    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "trainstack.cluster.ping",
            *LOCALHOST_ARGS,
        ],
        env=env,
        cwd=tmp_path,
    )
    assert "localhost: " in proc.stdout
    assert "ok=3" in proc.stdout
    # The installed copy ran, not this checkout.
    listing = run([str(VENV_BIN / "ansible-galaxy"), "collection", "list", "trainstack.cluster"], env=env)
    assert str(installed) in listing.stdout
    assert os.fspath(REPO) not in listing.stdout


# Roles, playbooks, plugins and the image templates are what an installed collection runs; tests, docs and
# benchmarks may use other collections without making them dependencies.
_RUNTIME_TREES = ("roles/", "playbooks/", "plugins/", "packer/", "meta/", "inventories/", "stacks/")


def _installed_collections() -> dict[str, str]:
    """namespace.name -> version of every collection the `ansible` package in the venv ships."""
    root = Path(_ansible_package_collections()) / "ansible_collections"
    found = {}
    for manifest in root.glob("*/*/MANIFEST.json"):
        info = json.loads(manifest.read_text())["collection_info"]
        found[f"{info['namespace']}.{info['name']}"] = info["version"]
    return found


def _fqcn_collections(known: set[str]) -> dict[str, set[str]]:
    """Collections named by an FQCN (`ns.name.plugin`) in the runtime trees, with the files naming them."""
    # `from ansible.utils.display import ...` is ansible-core's own package, not the ansible.utils collection.
    pattern = re.compile(
        r"(?<!from )(?<!import )\b("
        + "|".join(re.escape(name) for name in sorted(known))
        + r")\.[a-z_][a-z0-9_]*"
    )
    files = run(["git", "ls-files", *_RUNTIME_TREES]).stdout.split()
    used: dict[str, set[str]] = {}
    for name in files:
        path = REPO / name
        if not path.is_file():
            continue
        for match in pattern.finditer(path.read_text(errors="replace")):
            used.setdefault(match.group(1), set()).add(name)
    return used


def test_galaxy_dependencies_are_what_the_tree_uses() -> None:
    """Every collection the roles, playbooks and plugins call by FQCN is a dependency, and nothing else is;
    each range admits the version the `ansible` package in requirements.txt ships."""
    installed = _installed_collections()
    dependencies = yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"]
    used = _fqcn_collections(set(installed) - {"ansible.builtin"})
    assert sorted(dependencies) == sorted(used), f"used by FQCN: { {k: sorted(v) for k, v in used.items()} }"
    for name, wanted in dependencies.items():
        assert meets_requirements(installed[name], wanted), f"{name} {installed[name]} does not meet {wanted}"


def test_requires_ansible_is_the_tested_core() -> None:
    """meta/runtime.yml claims the ansible-core release line that requirements.txt pins and CI runs."""
    pinned = re.search(r"^ansible-core==(\d+)\.(\d+)\.\d+$", (REPO / "requirements.txt").read_text(), re.M)
    assert pinned, "requirements.txt pins no ansible-core"
    required = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    assert required == f">={pinned.group(1)}.{pinned.group(2)}.0"


def test_galaxy_urls_are_real_or_absent() -> None:
    """No placeholder links in the published metadata, and the repository named (Galaxy links the source)."""
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert galaxy.get("repository"), "galaxy.yml names no repository"
    for key in ("repository", "documentation", "homepage", "issues"):
        value = galaxy.get(key)
        assert value is None or (value.startswith("https://") and ".invalid" not in value), (key, value)


# Run in a process of its own: the collection loader must be set up before the collection is first imported,
# which a test process shared with other tests (pytest-xdist workers) cannot promise.
_SIGNATURES = """
import inspect, json
from tests.support import init_ansible_plugins
init_ansible_plugins()
from ansible_collections.trainstack.cluster.plugins.filter.stack import FilterModule
filters = FilterModule().filters().items()
print(json.dumps({name: list(inspect.signature(f).parameters)[1:] for name, f in filters}))
"""


def _filter_signatures() -> dict[str, list[str]]:
    """Each filter of the stack filter plugin and its arguments after the input."""
    return json.loads(run([str(VENV_BIN / "python"), "-c", _SIGNATURES]).stdout)


def test_every_filter_has_documentation() -> None:
    """`ansible-doc -t filter trainstack.cluster.<name>` documents every filter, with its real arguments."""
    filters = _filter_signatures()
    proc = run(
        [
            str(VENV_BIN / "ansible-doc"),
            "-t",
            "filter",
            "--json",
            *(f"trainstack.cluster.{name}" for name in sorted(filters)),
        ]
    )
    docs = json.loads(proc.stdout)
    assert sorted(docs) == sorted(f"trainstack.cluster.{name}" for name in filters)
    for name, arguments in filters.items():
        doc = docs[f"trainstack.cluster.{name}"]["doc"]
        assert doc["name"] == name
        assert doc["short_description"] and doc["description"], name
        assert "_value" in docs[f"trainstack.cluster.{name}"]["return"], name
        assert sorted(doc["options"]) == sorted(["_input", *arguments]), name
        assert [p.strip() for p in (doc.get("positional") or "").split(",") if p.strip()] == arguments, name


def test_lab_inventory_parses_before_the_lab_exists(tmp_path: Path) -> None:
    """ansible.cfg fails runs whose inventory does not parse; the lab directory (the default inventory) must
    still parse before `make lab-up` writes hosts.yml into it, or lab_up itself could not start."""
    lab = tmp_path / "local"
    lab.mkdir()
    source = REPO / "inventories" / "local"
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        # What the lab writes (hosts.yml, .lab/) is left out: the directory as a fresh checkout has it.
        if not path.is_file() or relative.name == "hosts.yml" or relative.parts[0].startswith("."):
            continue
        (lab / relative).parent.mkdir(parents=True, exist_ok=True)
        (lab / relative).write_bytes(path.read_bytes())
    assert not (lab / "hosts.yml").exists()
    proc = run(
        [str(VENV_BIN / "ansible"), "-i", str(lab), "localhost", "-c", "local", "-m", "ansible.builtin.ping"]
    )
    assert "localhost | SUCCESS" in proc.stdout
    listing = json.loads(run([str(VENV_BIN / "ansible-inventory"), "-i", str(lab), "--list"]).stdout)
    assert listing["_meta"]["hostvars"] == {}
