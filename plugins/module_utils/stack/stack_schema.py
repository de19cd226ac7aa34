# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The schema of a stack file (stacks/<id>.yml) and the validator that applies it.

Why a schema: a misspelt key (`verison`, `artifcats`) used to be ignored, so a stack silently lost a pin or
a download; a null section (`artifacts:` with nothing under it) read as "none". The schema is JSON Schema
(draft 2020-12) so reviewers and editors can use it as is (stacks/schema/stack.schema.json is written from
SCHEMA and a test keeps the two equal), but it lives here, in Python, because the Ansible modules that load
stacks run without the collection's data files and without the jsonschema library. The validator below
implements exactly the keywords SCHEMA uses and refuses a schema that uses any other, so it cannot drift into
silently skipping a rule. The cluster spec's schema (module_utils/cluster/cluster_spec.py) is applied by the
same validator (`problems(data, schema)`), so both kinds of file are refused in the same words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

SCHEMA_ID = "https://trainstack.invalid/schema/stack.schema.json"

_OS_ID = {"type": "string", "pattern": r"^[a-z]+-[0-9]+(\.[0-9]+)?$"}
_ARCH = {"type": "string", "enum": ["x86_64", "aarch64"]}
_VERSION = {"type": "string", "minLength": 1}
_NULLABLE_VERSION = {"type": ["string", "null"], "minLength": 1}


def _list_of(item: Mapping[str, Any], min_items: int = 1) -> dict[str, Any]:
    return {"type": "array", "items": dict(item), "minItems": min_items}


_ARTIFACT = {
    "type": "object",
    "description": "One downloaded file. `name` keys the lock file and the mirror layout.",
    "additionalProperties": False,
    "required": ["name", "url", "sha256"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.+_-]*$"},
        "url": {"type": "string", "pattern": r"^(https|http|file|s3)://\S+$"},
        "sha256": {"type": ["string", "null"], "pattern": r"^[0-9a-f]{64}$"},
        "arch": _ARCH,
        "verify": {
            "type": "boolean",
            "description": "false: installed without a checksum (needs unverified_reason).",
        },
        "unverified_reason": {"type": "string", "minLength": 10},
        "allow_http": {
            "type": "boolean",
            "description": "true: this artifact may come over plain http:// (its checksum still applies).",
        },
    },
    "allOf": [
        {
            "if": {"properties": {"verify": {"const": False}}, "required": ["verify"]},
            "then": {"required": ["unverified_reason"], "properties": {"sha256": {"type": "null"}}},
        },
        {
            "if": {"properties": {"url": {"pattern": "^http://"}}, "required": ["url"]},
            "then": {"required": ["allow_http"], "properties": {"allow_http": {"const": True}}},
        },
    ],
}

# Keys a component and its per-OS override share; the override may not change where the component applies.
_COMPONENT_FIELDS: dict[str, Any] = {
    "version": _VERSION,
    "source": {"type": "string", "minLength": 1},
    "artifacts": _list_of({"$ref": "#/$defs/artifact"}, 0),
    "packages": _list_of({"type": "string", "minLength": 1}, 0),
    "extra_packages": _list_of({"type": "string", "minLength": 1}, 0),
    "kernel_modules": {"type": "string", "enum": ["open", "proprietary"]},
    "cuda_major": {"type": "integer"},
    "cuda_runtime": _NULLABLE_VERSION,
    "nccl_pin": _NULLABLE_VERSION,
    "variant": {"type": "string", "enum": ["cuda", "cpu"]},
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "trainstack training stack",
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "status", "scope", "components"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[a-z][a-z0-9.-]*$"},
        "status": {"type": "string", "enum": ["current", "previous", "candidate", "retired"]},
        "previous": {"type": ["string", "null"]},
        "released": {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "checksums_complete": {"type": "boolean"},
        "sources": _list_of({"type": "string", "pattern": r"^https?://"}),
        "scope": {
            "type": "object",
            "additionalProperties": False,
            "required": ["os", "arch", "instance_families"],
            "properties": {
                "os": _list_of(_OS_ID),
                "lab_os": _list_of(_OS_ID, 0),
                "arch": _list_of(_ARCH),
                "instance_families": _list_of({"type": "string", "pattern": r"^[a-z0-9-]+$"}),
            },
        },
        "environment": {
            "type": "object",
            "propertyNames": {"pattern": r"^[A-Z][A-Z0-9_]*$"},
            "additionalProperties": {"type": "string"},
        },
        "components": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": r"^[a-z][a-z0-9_]*$"},
            "additionalProperties": {"$ref": "#/$defs/component"},
        },
    },
    "$defs": {
        "artifact": _ARTIFACT,
        "component": {
            "type": "object",
            "additionalProperties": False,
            "required": ["version", "os", "arch", "source"],
            "properties": {
                **_COMPONENT_FIELDS,
                "os": _list_of(_OS_ID),
                "arch": _list_of(_ARCH),
                "by_os": {
                    "type": "object",
                    "propertyNames": _OS_ID,
                    "additionalProperties": {"$ref": "#/$defs/override"},
                },
            },
        },
        "override": {"type": "object", "additionalProperties": False, "properties": dict(_COMPONENT_FIELDS)},
    },
}

# ---------------------------------------------------------------- validator

_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description"})
_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_TYPE_WORDS = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}


class SchemaError(ValueError):
    """The data breaks the schema; `problems` holds one 'dotted.path: what is wrong' line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    for kind, word in _TYPE_WORDS.items():
        if isinstance(value, kind):
            return f"{word} ({value!r})" if kind in (str, int, bool) else word
    return type(value).__name__


def _join(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))


class _Validator:
    """Walks data against SCHEMA, collecting every problem (not only the first) with its dotted path."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root = schema
        self.problems: list[str] = []

    def check(self, schema: Mapping[str, Any], value: Any, path: str) -> None:
        """Apply one schema node; the type is checked first so a null section gets one clear message."""
        if "$ref" in schema:
            self.check(self._resolve(schema["$ref"]), value, path)
            return
        unknown = set(schema) - _ANNOTATIONS - set(_KEYWORDS)
        if unknown:
            raise ValueError(f"schema uses keywords this validator lacks: {sorted(unknown)}")
        if not self._type_ok(schema, value, path):
            return
        for keyword, handler in _KEYWORDS.items():
            if keyword in schema and keyword != "type":
                handler(self, schema, value, path)

    def is_valid(self, schema: Mapping[str, Any], value: Any) -> bool:
        probe = _Validator(self.root)
        probe.check(schema, value, "")
        return not probe.problems

    def _resolve(self, ref: str) -> Mapping[str, Any]:
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise ValueError(f"schema: only local $defs references are supported, not {ref}")
        return self.root["$defs"][ref[len(prefix) :]]

    def _type_ok(self, schema: Mapping[str, Any], value: Any, path: str) -> bool:
        wanted = schema.get("type")
        if wanted is None:
            return True
        names = [wanted] if isinstance(wanted, str) else list(wanted)
        if any(_TYPES[name](value) for name in names):
            return True
        self.problems.append(f"{path or '(top)'}: must be {' or '.join(names)}, not {_describe(value)}")
        return False

    def error(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '(top)'}: {message}")


def _k_properties(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, Mapping):
        return
    for key, sub in schema["properties"].items():
        if key in value:
            v.check(sub, value[key], _join(path, key))


def _k_additional(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, Mapping):
        return
    known = list(schema.get("properties", {}))
    extra = schema["additionalProperties"]
    for key in value:
        if key in known:
            continue
        if extra is False:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.7)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(known)})"
            v.error(_join(path, key), f"unknown key{hint}")
        elif isinstance(extra, Mapping):
            v.check(extra, value[key], _join(path, key))


def _k_required(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, Mapping):
        for key in schema["required"]:
            if key not in value:
                v.error(_join(path, key), "is required")


def _k_property_names(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str) or not v.is_valid(schema["propertyNames"], key):
                pattern = schema["propertyNames"].get("pattern", "")
                v.error(_join(path, key), f"key name does not match {pattern}")


def _k_min_properties(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, Mapping) and len(value) < schema["minProperties"]:
        v.error(path, f"needs at least {schema['minProperties']} entries")


def _k_items(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            v.check(schema["items"], item, _join(path, index))


def _k_min_items(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, list) and len(value) < schema["minItems"]:
        v.error(path, f"needs at least {schema['minItems']} item(s)")


def _k_min_length(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, str) and len(value) < schema["minLength"]:
        v.error(path, f"must be at least {schema['minLength']} characters long")


def _k_pattern(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, str) and not re.search(schema["pattern"], value):
        v.error(path, f"{value!r} does not match {schema['pattern']}")


def _k_minimum(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if _TYPES["number"](value) and value < schema["minimum"]:
        v.error(path, f"{value!r} is less than the minimum {schema['minimum']}")


def _k_maximum(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if _TYPES["number"](value) and value > schema["maximum"]:
        v.error(path, f"{value!r} is more than the maximum {schema['maximum']}")


def _k_max_length(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if isinstance(value, str) and len(value) > schema["maxLength"]:
        v.error(path, f"must be at most {schema['maxLength']} characters long")


def _k_enum(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if value not in schema["enum"]:
        v.error(path, f"{value!r} is not one of {', '.join(map(str, schema['enum']))}")


def _k_const(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if value != schema["const"] or type(value) is not type(schema["const"]):
        v.error(path, f"must be {schema['const']!r}")


def _k_all_of(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    for sub in schema["allOf"]:
        v.check(sub, value, path)


def _k_if(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    if "then" in schema and v.is_valid(schema["if"], value):
        v.check(schema["then"], value, path)


def _k_applied_elsewhere(v: _Validator, schema: Mapping[str, Any], value: Any, path: str) -> None:
    """`type` is checked first by the validator and `then` by `if`; listed so the keywords are known."""


_KEYWORDS = {
    "type": _k_applied_elsewhere,
    "properties": _k_properties,
    "additionalProperties": _k_additional,
    "required": _k_required,
    "propertyNames": _k_property_names,
    "minProperties": _k_min_properties,
    "items": _k_items,
    "minItems": _k_min_items,
    "minLength": _k_min_length,
    "maxLength": _k_max_length,
    "minimum": _k_minimum,
    "maximum": _k_maximum,
    "pattern": _k_pattern,
    "enum": _k_enum,
    "const": _k_const,
    "allOf": _k_all_of,
    "if": _k_if,
    "then": _k_applied_elsewhere,
}


def problems(data: Any, schema: Mapping[str, Any] | None = None) -> list[str]:
    """Every schema problem of a stack, one 'dotted.path: message' line each; empty when it conforms."""
    validator = _Validator(schema or SCHEMA)
    validator.check(validator.root, data, "")
    return validator.problems


def validate(data: Any, source: str = "stack") -> None:
    """Raise SchemaError naming the file (`source`) and every bad key by its dotted path."""
    found = problems(data)
    if found:
        raise SchemaError([f"{source}: {line}" for line in found])
