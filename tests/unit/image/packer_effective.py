"""The effective settings of every amazon-ebs build, as Packer itself evaluates them.

The templates build each AMI from an OS-family source plus a `dynamic "source"` block that fills in the
image's name, tags, instance type and AMI filter from `locals`. Reading the text alone cannot tell what a
build ends up with, so this module merges, for each build, its source's settings with the build's own
(statically with python-hcl2, as Packer does: a build may only add), substitutes the dynamic block's iterator
by the entry it stands for, and asks `packer console` to evaluate every resulting expression with the given
variables. The answer is comparable across layouts: template sets that give the same answer build the same
AMIs.

Run as a script to record the answer (tests/unit/image/amazon_builds.json) after an intended change of the
builds: `.venv/bin/python -m tests.unit.image.packer_effective > tests/unit/image/amazon_builds.json`.
"""

from __future__ import annotations

import json
import re
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
            if k != "__is_block__"
        ]
        return "{" + ", ".join(items) + "}"
    text = str(value)
    if text.startswith("${") and text.endswith("}") and text.count("${") == 1:
        return text[2:-1]
    return text


def _load(path: Path) -> dict[str, Any]:
    with open(path) as handle:
        return hcl2.load(handle)


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


def _build_sources(build: dict[str, Any], sources: dict[str, Any], console: Console) -> dict[str, dict]:
    """Source name -> merged settings (unevaluated, iterator replaced) of a build's amazon-ebs sources."""
    merged: dict[str, dict] = {}
    for block in build.get("source", []):
        for ref, override in block.items():
            kind, name = _strip_quotes(ref).split(".", 1)
            if kind == "amazon-ebs":
                merged[_strip_quotes(override.get("name", name))] = _merge(sources[name], override, ref)
    for ref in build.get("sources", []):
        _keyword, kind, name = _strip_quotes(ref).split(".", 2)
        if kind == "amazon-ebs":
            merged[name] = sources[name]
    for block in build.get("dynamic", []):
        for kind, body in block.items():
            if _strip_quotes(kind) == "source":
                merged.update(_dynamic_sources(body, sources, console))
    for body in merged.values():
        body.pop("name", None)
    return merged


def _dynamic_sources(body: dict[str, Any], sources: dict[str, Any], console: Console) -> dict[str, dict]:
    collection = to_expression(body["for_each"])
    iterator = to_expression(body.get("iterator", "source"))
    (content,) = body["content"]
    (label,) = body["labels"]
    keys = console.evaluate({"keys": f"keys({collection})"})["keys"]
    labels = console.evaluate(
        {key: to_expression(_substitute(label, iterator, key, collection)) for key in keys}
    )
    merged = {}
    for key in keys:
        kind, name = labels[key].split(".", 1)
        if kind == "amazon-ebs":
            override = _substitute(content, iterator, key, collection)
            merged[key] = _merge(sources[name], {"name": key, **override}, f"{labels[key]} {key}")
    return merged


def _flatten(prefix: str, value: Any, into: dict[str, str]) -> None:
    """Nested blocks become name.index.attr entries, attributes become expressions to evaluate."""
    for attr, item in value.items():
        if attr == "__is_block__":
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


def _text(value: Any) -> Any:
    """Provisioners as text: they use build.ID and source.name, which only exist during a build."""
    if isinstance(value, dict):
        return {_strip_quotes(k): _text(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def effective_builds(
    packer_dir: Path = PACKER_DIR, variables: dict[str, str] | None = None
) -> dict[str, Any]:
    """{"images": {"<build>.amazon-ebs.<source>": settings}, "steps": {"<build>": its steps}}."""
    console = Console(packer_dir, PROBE_VARS if variables is None else variables)
    sources = amazon_sources(packer_dir)
    expressions: dict[str, str] = {}
    steps: dict[str, dict[str, Any]] = {}
    for build in _blocks(packer_dir, "build"):
        build_name = _strip_quotes(build["name"])
        for source_name, settings in _build_sources(build, sources, console).items():
            _flatten(f"{build_name}.amazon-ebs.{source_name}", settings, expressions)
            steps[build_name] = {
                "provisioners": _text(build.get("provisioner", [])),
                "post-processors": _text(build.get("post-processors", [])),
            }
    images = _unflatten(_mask(console.evaluate(expressions)))
    return {"images": images, "steps": steps}


if __name__ == "__main__":
    json.dump(effective_builds(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
