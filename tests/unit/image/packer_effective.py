"""What the amazon-ebs builds build, per flavour, as Packer itself evaluates it.

The templates build each AMI from the one amazon-ebs source plus a `dynamic "source"` block that fills in the
image's name, tags, instance type, AMI filter, login user and root volume from `locals`, and one build serves
every flavour. Reading the text alone cannot tell what a build ends up with, so this module merges, for each
image, its source's settings with the build's own (statically with python-hcl2, as Packer does: a build may
only add), substitutes the dynamic block's iterator by the entry it stands for, and asks `packer console` to
evaluate every resulting expression, and every provisioner and post-processor of the build (source.name is the
image's name, build.* a placeholder), with the given variables. The answer is comparable across layouts:
template sets that give the same answer build the same AMIs.

`flavour_builds()` answers per flavour as a user picks it: it asks make for the `packer build` command of
`make image-ami IMAGE_FLAVOUR=<flavour>` (`make -n`) and keeps the images that command selects (its
-only/-except globs and -var values). Its record, tests/data/golden/packer_flavour_builds.json
(test_packer_flavour_golden.py), is written after an intended change of the builds by `.venv/bin/python -m
tests.unit.image.packer_effective --flavours > tests/data/golden/packer_flavour_builds.json`.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import hcl2

REPO = Path(__file__).resolve().parents[3]
PACKER_DIR = REPO / "packer"

# Every variable a build reads gets a value of its own, so that a setting wired to the wrong variable (or to a
# constant that happens to equal a default) shows up as a difference.
PROBE_VARS: dict[str, str] = {
    "stack_id": "ts-probe",
    "source_revision": "rev-probe",
    "output_dir": "/probe/out",
    "ansible_playbook": "/probe/ansible-playbook",
    "artifact_mirror_url": "https://mirror.probe",
    "aws_region": "eu-probe-1",
    "ami_copy_regions": '["eu-copy-1", "eu-copy-2"]',
    "kms_key_id": "alias/probe",
    "ami_copy_kms_key_ids": '{"eu-copy-1" = "alias/copy"}',
    "ssh_source_cidrs": '["198.51.100.7/32"]',
    "ssh_interface": "public_dns",
    "root_volume_gb": "101",
    "root_volume_iops": "3001",
    "root_volume_throughput": "251",
    "instance_type_x86_64": "x86.probe",
    "instance_type_arm64": "arm.probe",
    "subnet_id": "subnet-probe",
    "ssh_timeout": "7m",
    "pcluster_version": "9.9.9",
    "eks_kubernetes_version": "1.99",
    "extra_tags": '{"probe" = "yes"}',
    "custom_endpoint_ec2": "http://ec2.probe",
    "ssh_host": "host.probe",
    "ssh_port": "2222",
    "skip_credential_validation": "true",
    "wheelhouse": "/probe/wheels",
    "pytorch_testcases": '["pytorch/fsdp", "jax/llama"]',
}
# local.timestamp differs per run; it is compared as a placeholder.
TIMESTAMP = re.compile(r"\b\d{8}-\d{6}\b")
# packer console reads one line; longer lines than this are split over several calls.
CHUNK_CHARS = 8000


def _strip_quotes(key: str) -> str:
    """python-hcl2 keeps HCL's quotes on labels and quoted keys."""
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def _is_block_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
    )


def to_expression(value: Any) -> str:
    """HCL text of a python-hcl2 value (strings keep their quotes; ${x} alone is the expression x)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(to_expression(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [
            f"{json.dumps(_strip_quotes(k))} = {to_expression(v)}"
            for k, v in value.items()
            if not k.startswith("__")
        ]
        return "{" + ", ".join(items) + "}"
    text = str(value)
    if text.startswith("${") and _closing_brace(text, 1) == len(text) - 1:
        return text[2:-1]
    return text


def _closing_brace(text: str, start: int) -> int:
    """Index of the brace closing the one at text[start] (braces in the templates' strings are balanced)."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return -1


def _load(path: Path) -> dict[str, Any]:
    """python-hcl2's parse of a template file (parsed once per content: python-hcl2 is slow)."""
    return copy.deepcopy(_parse(path.read_text()))


@functools.lru_cache(maxsize=32)
def _parse(text: str) -> dict[str, Any]:
    return hcl2.loads(text)


def _blocks(packer_dir: Path, kind: str) -> list[Any]:
    return [block for path in sorted(packer_dir.glob("*.pkr.hcl")) for block in _load(path).get(kind, [])]


def amazon_sources(packer_dir: Path = PACKER_DIR) -> dict[str, dict[str, Any]]:
    """Top-level amazon-ebs sources by name, as python-hcl2 parses them."""
    return {
        _strip_quotes(name): body
        for block in _blocks(packer_dir, "source")
        for kind, named in block.items()
        if _strip_quotes(kind) == "amazon-ebs"
        for name, body in named.items()
    }


def _merge(source: dict[str, Any], override: dict[str, Any], where: str) -> dict[str, Any]:
    """Packer's rule: a build's source block may add settings, never set one its source already sets."""
    twice = sorted(set(source) & set(override) - {"__is_block__"})
    if twice:
        raise ValueError(f"{where}: {twice} set by both the source and the build")
    return {**source, **override}


def _substitute(value: Any, iterator: str, key: str, collection: str) -> Any:
    """Replace a dynamic block's iterator by the entry of its for_each collection that it stands for."""
    if isinstance(value, dict):
        return {k: _substitute(v, iterator, key, collection) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, iterator, key, collection) for v in value]
    if not isinstance(value, str):
        return value
    value = re.sub(rf"\b{iterator}\.key\b", lambda _: json.dumps(key), value)
    return re.sub(rf"\b{iterator}\.value\b", lambda _: f"({collection})[{json.dumps(key)}]", value)


class Console:
    """Evaluates HCL expressions in the templates' context (variables and locals) with `packer console`."""

    def __init__(self, packer_dir: Path, variables: dict[str, str]) -> None:
        self.packer_dir = packer_dir
        self.var_args = [arg for name, val in variables.items() for arg in ("-var", f"{name}={val}")]

    def evaluate(self, expressions: dict[str, str]) -> dict[str, Any]:
        """Values of named expressions, in as few `packer console` calls as its line limit allows."""
        values: dict[str, Any] = {}
        chunk: dict[str, str] = {}
        for name, expression in expressions.items():
            chunk[name] = expression
            if sum(len(e) + len(n) + 8 for n, e in chunk.items()) > CHUNK_CHARS:
                values.update(self._call(chunk))
                chunk = {}
        if chunk:
            values.update(self._call(chunk))
        return values

    def _call(self, expressions: dict[str, str]) -> dict[str, Any]:
        line = "jsonencode({" + ", ".join(f"{json.dumps(n)} = {e}" for n, e in expressions.items()) + "})"
        proc = subprocess.run(
            ["packer", "console", *self.var_args, str(self.packer_dir)],
            input=line + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as err:
            raise RuntimeError(
                f"packer console could not evaluate:\n{line}\n{proc.stdout}{proc.stderr}"
            ) from err


def _flatten(prefix: str, value: Any, into: dict[str, str]) -> None:
    """Nested blocks become name.index.attr entries, attributes become expressions to evaluate."""
    for attr, item in value.items():
        if attr.startswith("__"):
            continue
        if _is_block_list(item):
            for index, block in enumerate(item):
                _flatten(f"{prefix}/{attr}[{index}]", block, into)
        else:
            into[f"{prefix}/{attr}"] = to_expression(item)


def _unflatten(values: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in values.items():
        node = tree
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return TIMESTAMP.sub("<timestamp>", value) if isinstance(value, str) else value


# ------------------------------------------------------------------------ per flavour, as make selects it
# The AMI flavours `make image-ami IMAGE_FLAVOUR=<flavour>` builds (mk/image.mk, docs/image-factory.md).
FLAVOURS = ("base-gpu", "slurm-gpu", "pcluster-gpu", "eks-gpu", "pcs-gpu", "batch-gpu")
# Values that only exist while a build runs; the steps are evaluated with these stand-ins.
_SOURCE_NAME = re.compile(r"(?<![\w./-])source\.name\b")
_BUILD_VAR = re.compile(r"(?<![\w./-])build\.(\w+)\b")


def make_packer_command(target: str, **make_vars: str) -> list[str]:
    """The `packer build` command line that `make <target>` runs, as `make -n` prints it (set-up skipped)."""
    proc = subprocess.run(
        [
            "make",
            "-n",
            "-o",
            "setup",
            "--no-print-directory",
            target,
            "PACKER=packer",
            *(f"{name}={value}" for name, value in make_vars.items()),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    commands = [shlex.split(line) for line in proc.stdout.splitlines() if line.startswith("packer build")]
    if proc.returncode != 0 or len(commands) != 1:
        raise RuntimeError(f"make -n {target}: expected one `packer build`:\n{proc.stdout}{proc.stderr}")
    return commands[0]


def parse_build_command(command: list[str]) -> dict[str, Any]:
    """What in a `packer build` command line decides what is built: -only, -except, -var, the template."""
    parsed: dict[str, Any] = {"only": [], "except": [], "vars": {}, "template": None}
    args = iter(command[2:])
    for arg in args:
        if not arg.startswith("-"):
            parsed["template"] = arg
            continue
        flag, _eq, value = arg.lstrip("-").partition("=")
        if flag not in ("only", "except", "var", "var-file"):
            continue  # -force, -color=false, -on-error=...: how to build, not what
        value = value if _eq else next(args)
        if flag == "var-file":
            raise ValueError(f"{command}: -var-file is not evaluated here")
        if flag == "var":
            name, _eq, val = value.partition("=")
            parsed["vars"][name] = val
        else:
            parsed[flag] += [glob for glob in value.split(",") if glob]
    return parsed


def _selected(full_name: str, only: list[str], except_: list[str]) -> bool:
    """Packer's -only/-except on `<build>.<type>.<name>` (its globs' `*` crosses dots, as fnmatch's does)."""
    if only and not any(fnmatch.fnmatchcase(full_name, glob) for glob in only):
        return False
    return not any(fnmatch.fnmatchcase(full_name, glob) for glob in except_)


def _build_source_refs(builds: list[dict[str, Any]], console: Console) -> list[list[tuple[str, str, Any]]]:
    """Per build, (type, name, (source it refines, its own settings)) of each source: listed, named, dynamic.

    The dynamic blocks' keys, then their labels, are evaluated for all builds at once (two console calls)."""
    dynamic = [
        (index, body)
        for index, build in enumerate(builds)
        for block in build.get("dynamic", [])
        for kind, body in block.items()
        if _strip_quotes(kind) == "source"
    ]
    collections = [to_expression(body["for_each"]) for _index, body in dynamic]
    keys = console.evaluate({str(n): f"keys({c})" for n, c in enumerate(collections)}) if dynamic else {}
    labels = (
        console.evaluate(
            {
                f"{n}/{key}": to_expression(
                    _substitute(
                        body["labels"][0], to_expression(body.get("iterator", "source")), key, collection
                    )
                )
                for n, ((_index, body), collection) in enumerate(zip(dynamic, collections, strict=True))
                for key in keys[str(n)]
            }
        )
        if dynamic
        else {}
    )
    refs: list[list[tuple[str, str, Any]]] = [[] for _build in builds]
    for index, build in enumerate(builds):
        for ref in build.get("sources", []):
            _keyword, kind, name = _strip_quotes(ref).split(".", 2)
            refs[index].append((kind, name, (name, {})))
        for block in build.get("source", []):
            for ref, override in block.items():
                kind, name = _strip_quotes(ref).removeprefix("source.").split(".", 1)
                refs[index].append((kind, _strip_quotes(override.get("name", name)), (name, override)))
    for n, ((index, body), collection) in enumerate(zip(dynamic, collections, strict=True)):
        iterator = to_expression(body.get("iterator", "source"))
        (content,) = body["content"]
        for key in keys[str(n)]:
            kind, name = labels[f"{n}/{key}"].split(".", 1)
            override = _substitute(content, iterator, key, collection)
            refs[index].append((kind, key, (name, {**override, "name": key})))
    return refs


def _contextual(value: Any, source_name: str) -> Any:
    """A step's expressions with source.name and build.* (known only during a build) replaced by values."""
    if isinstance(value, dict):
        return {k: _contextual(v, source_name) for k, v in value.items()}
    if isinstance(value, list):
        return [_contextual(v, source_name) for v in value]
    if not isinstance(value, str):
        return value
    value = _SOURCE_NAME.sub(lambda _: json.dumps(source_name), value)
    return _BUILD_VAR.sub(lambda m: json.dumps(f"<build.{m.group(1)}>"), value)


def _flatten_steps(prefix: str, steps: list[Any], source_name: str, into: dict[str, str]) -> None:
    """Each step as `<prefix>[i]/<type>/<attr>` expressions, in order."""
    for index, step in enumerate(steps):
        ((kind, body),) = [(k, v) for k, v in step.items() if not k.startswith("__")]
        _flatten(f"{prefix}[{index}]/{_strip_quotes(kind)}", _contextual(body, source_name), into)


def _post_processor_chains(build: dict[str, Any]) -> list[list[Any]]:
    """A build's post-processors as Packer runs them: each lone post-processor and each sequence a chain."""
    chains = [[single] for single in build.get("post-processor", [])]
    chains += [chain.get("post-processor", []) for chain in build.get("post-processors", [])]
    return chains


def selected_images(command: list[str], packer_dir: Path | None = None) -> dict[str, Any]:
    """What a `packer build` command line builds: {"sources": ["<type>.<name>", ...], "images": {name: ...}}.

    Images are the selected amazon-ebs ones, by source name, each with its evaluated "settings",
    "provisioners" and "post-processors"; the command's -var values apply on top of PROBE_VARS' (the
    selection's own variables are not among those)."""
    parsed = parse_build_command(command)
    if packer_dir is None:
        packer_dir = REPO / parsed["template"]
    console = Console(packer_dir, {**parsed["vars"], **PROBE_VARS})
    sources = amazon_sources(packer_dir)
    selected: list[str] = []
    expressions: dict[str, str] = {}
    builds = _blocks(packer_dir, "build")
    for build, refs in zip(builds, _build_source_refs(builds, console), strict=True):
        build_name = _strip_quotes(build.get("name", ""))
        for kind, name, (family, body) in refs:
            full_name = ".".join(part for part in (build_name, kind, name) if part)
            if not _selected(full_name, parsed["only"], parsed["except"]):
                continue
            selected.append(f"{kind}.{name}")
            if kind != "amazon-ebs":
                continue
            if name in {s.split(".", 1)[1] for s in selected[:-1] if s.startswith("amazon-ebs.")}:
                raise ValueError(f"{full_name}: two selected images share the source name {name}")
            settings = _merge(sources[family], body, full_name)
            settings.pop("name", None)
            _flatten(f"{name}/settings", settings, expressions)
            _flatten_steps(f"{name}/provisioners", build.get("provisioner", []), name, expressions)
            for chain, steps in enumerate(_post_processor_chains(build)):
                _flatten_steps(f"{name}/post-processors[{chain}]", steps, name, expressions)
    values = _mask(console.evaluate(expressions))
    return {"sources": sorted(selected), "images": _unflatten(_mask_repo(values))}


def _mask_repo(value: Any) -> Any:
    """The checkout's path as <repo>, so that the record holds in any checkout."""
    if isinstance(value, dict):
        return {k: _mask_repo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_repo(v) for v in value]
    return value.replace(str(REPO), "<repo>") if isinstance(value, str) else value


def flavour_builds(flavours: tuple[str, ...] = FLAVOURS) -> dict[str, Any]:
    """Flavour -> what `make image-ami IMAGE_FLAVOUR=<flavour>` builds (selected_images)."""
    return {
        flavour: selected_images(make_packer_command("image-ami", IMAGE_FLAVOUR=flavour))
        for flavour in flavours
    }


if __name__ == "__main__":
    json.dump(flavour_builds(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
