# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The one catalog of instance types (stacks/instance_types.yml), checked, merged and looked up.

Why one loader: GPU count, EFA interfaces, the NCCL environment, the GPU generation and the health floors
of an instance type used to live in five tables that drifted apart; everything now asks this module.
Ansible ships module_utils to a target as Python, never the YAML beside it, so the catalog travels as the
generated module instance_catalog_data (`make instance-catalog`); `load_file` reads the YAML itself for
that generator and for the test that keeps the two equal. Standard library only (PyYAML inside load_file).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1
# Keys merged one level deep (defaults, family and type each add to them); every other key is replaced.
_NESTED = ("env", "health")
_GENERATIONS = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
_ARCHES = ("x86_64", "aarch64")
_HEALTH_KEYS = ("gpu_memory_tolerance", "memlock_kib", "mounts", "disk_min_free_pct", "disk_paths")


class CatalogError(ValueError):
    """A malformed catalog or an unknown name; the message names the key and the rule it breaks."""


@dataclass(frozen=True)
class InstanceType:
    """Everything the collection knows about one instance type, after defaults and family are merged in."""

    name: str
    family: str | None
    sources: tuple[str, ...]
    nvidia: bool
    arch: str
    gpu_count: int | None
    gpu_model: str | None
    gpu_memory_mib: int | None
    gpu_generation: str | None
    gpu_arch: str | None
    bf16_dense_flops: float | None
    accelerator: str | None
    accelerator_count: int
    host_memory_gib: int | None
    min_memory_gib: float
    efa_interfaces: int
    gpudirect_rdma: bool
    nvlink_links_per_gpu: int
    nvswitch: bool
    nccl_allreduce_busbw_gbps: float | None
    vcpus: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for Jinja and JSON (lists, not tuples)."""
        data = asdict(self)
        data["sources"] = list(self.sources)
        return data

    def health_expectations(self) -> dict[str, Any]:
        """The flat row node_health.py checks a node against: hardware facts plus the site's health policy.

        gdrcopy follows GPUDirect RDMA: GDRCopy is installed and checked exactly where EFA reads GPU memory.
        """
        return {
            "gpu_count": self.gpu_count,
            "gpu_model": self.gpu_model,
            "gpu_memory_mib": self.gpu_memory_mib,
            "efa_interfaces": self.efa_interfaces,
            "nvlink_links_per_gpu": self.nvlink_links_per_gpu,
            "gdrcopy": self.gpudirect_rdma,
            "min_memory_gib": self.min_memory_gib,
            "nccl_allreduce_busbw_gbps": self.nccl_allreduce_busbw_gbps,
            **copy.deepcopy(self.health),
        }


# ---------------------------------------------------------------- validation

_Check = tuple[str, tuple[type, ...], bool]  # (rule text, accepted types, may be null)
_INT = (int,)
_NUM = (int, float)
_KEYS: dict[str, _Check] = {
    "nvidia": ("a boolean", (bool,), False),
    "arch": (f"one of {', '.join(_ARCHES)}", (str,), False),
    "gpu_count": ("an integer >= 0, or null (detected on the node)", _INT, True),
    "gpu_model": ("a string or null", (str,), True),
    "gpu_memory_mib": ("an integer > 0 or null", _INT, True),
    "gpu_generation": (f"one of {', '.join(_GENERATIONS)} or null", (str,), True),
    "gpu_arch": ("an sm_NN string or null", (str,), True),
    "bf16_dense_flops": ("a number > 0 or null", _NUM, True),
    "accelerator": ("a string or null", (str,), True),
    "accelerator_count": ("an integer >= 0", _INT, False),
    "host_memory_gib": ("an integer > 0 or null", _INT, True),
    "min_memory_gib": ("a number > 0", _NUM, False),
    "vcpus": ("an integer > 0 or null (EC2's DefaultVCpus)", _INT, True),
    "efa_interfaces": ("an integer >= 0", _INT, False),
    "gpudirect_rdma": ("a boolean", (bool,), False),
    "nvlink_links_per_gpu": ("an integer >= 0", _INT, False),
    "nvswitch": ("a boolean", (bool,), False),
    "nccl_allreduce_busbw_gbps": ("a number > 0 or null", _NUM, True),
    "env": ("a mapping of variable names to strings", (dict,), False),
    "health": (f"a mapping with keys among {', '.join(_HEALTH_KEYS)}", (dict,), False),
}
_FAMILY_ONLY = ("sources",)


def _fail(where: str, key: str, rule: str, value: Any) -> CatalogError:
    return CatalogError(f"instance catalog: {where}.{key} must be {rule} (got {value!r})")


def _check_value(where: str, key: str, value: Any) -> None:
    """Type and range of one key; bool is not an int here (YAML `yes` must not count as 1 GPU)."""
    rule, types, nullable = _KEYS[key]
    if value is None:
        if not nullable:
            raise _fail(where, key, rule, value)
        return
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise _fail(where, key, rule, value)
    _check_range(where, key, rule, value)


def _check_range(where: str, key: str, rule: str, value: Any) -> None:
    positive = key in ("gpu_memory_mib", "bf16_dense_flops", "host_memory_gib", "min_memory_gib", "vcpus")
    if key in ("nccl_allreduce_busbw_gbps",) or positive:
        if value <= 0:
            raise _fail(where, key, rule, value)
    elif isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise _fail(where, key, rule, value)
    if (key == "arch" and value not in _ARCHES) or (key == "gpu_generation" and value not in _GENERATIONS):
        raise _fail(where, key, rule, value)
    if key == "gpu_arch" and not (value.startswith("sm_") and value[3:].isdigit()):
        raise _fail(where, key, rule, value)
    if key == "env" and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _fail(where, key, rule, value)
    if key == "health" and set(value) - set(_HEALTH_KEYS):
        raise _fail(where, key, rule, value)


def _check_entry(where: str, entry: Any, allowed_extra: tuple[str, ...] = ()) -> None:
    if not isinstance(entry, Mapping):
        raise CatalogError(f"instance catalog: {where} must be a mapping (got {entry!r})")
    for key, value in entry.items():
        if key in allowed_extra:
            continue
        if key not in _KEYS:
            known = ", ".join(sorted((*_KEYS, *allowed_extra)))
            raise CatalogError(f"instance catalog: {where}.{key} is not a known key (known: {known})")
        _check_value(where, key, value)


def _family_of(name: str) -> str | None:
    """EC2 names are `<family>.<size>`; names without a dot (lab, local) belong to no family."""
    return name.split(".", 1)[0] if "." in name else None


def validate(data: Any) -> None:
    """Refuse a catalog before anything reads it; each message names the offending key."""
    if not isinstance(data, Mapping):
        raise CatalogError("instance catalog: the document must be a mapping")
    if data.get("schema") != SCHEMA:
        raise CatalogError(f"instance catalog: schema must be {SCHEMA} (got {data.get('schema')!r})")
    for section in ("defaults", "families", "types"):
        if not isinstance(data.get(section), Mapping):
            raise CatalogError(f"instance catalog: '{section}' must be a mapping")
    missing = sorted(set(_KEYS) - set(data["defaults"]))
    if missing:
        raise CatalogError(f"instance catalog: defaults lacks {', '.join(missing)}")
    _check_entry("defaults", data["defaults"])
    for family, entry in data["families"].items():
        _check_entry(f"families.{family}", entry, _FAMILY_ONLY)
        sources = entry.get("sources")
        if not sources or not all(isinstance(s, str) and s.startswith("https://") for s in sources):
            raise CatalogError(f"instance catalog: families.{family}.sources must list https:// addresses")
    for name, entry in data["types"].items():
        _check_entry(f"types.{name}", entry)
        family = _family_of(str(name))
        if family is not None and family not in data["families"]:
            raise CatalogError(f"instance catalog: types.{name} needs families.{family} (its sources)")
        _check_merged(str(name), _merge(data, str(name)))


def _check_merged(name: str, merged: Mapping[str, Any]) -> None:
    """Rules across keys, on the merged entry: an NVIDIA GPU type names its model and generation."""
    where = f"types.{name}"
    if not merged["nvidia"] and merged["gpu_count"]:
        raise _fail(where, "gpu_count", "0 when nvidia is false", merged["gpu_count"])
    if merged["gpu_count"] and not (merged["gpu_model"] and merged["gpu_generation"] and merged["gpu_arch"]):
        raise CatalogError(f"instance catalog: {where} has GPUs but no gpu_model/gpu_generation/gpu_arch")
    if merged["host_memory_gib"] and merged["min_memory_gib"] > merged["host_memory_gib"]:
        raise _fail(where, "min_memory_gib", "at most host_memory_gib", merged["min_memory_gib"])


def _merge(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """defaults, then the family, then the type; env and health merge key by key."""
    family = _family_of(name)
    layers = [data["defaults"], data["families"].get(family, {}) if family else {}, data["types"][name]]
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key in _FAMILY_ONLY:
                continue
            if key in _NESTED:
                merged[key] = {**merged.get(key, {}), **copy.deepcopy(value)}
            else:
                merged[key] = copy.deepcopy(value)
    return merged


# ---------------------------------------------------------------- lookups


class Catalog:
    """A validated catalog; lookups answer merged entries and refuse unknown names with the known ones."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        validate(data)
        self._data = copy.deepcopy(dict(data))

    def names(self) -> list[str]:
        """Every instance type the catalog knows, sorted."""
        return sorted(self._data["types"])

    def families(self) -> list[str]:
        """Every instance family the catalog knows, sorted."""
        return sorted(self._data["families"])

    def get(self, name: str, given: Mapping[str, Any] | None = None) -> InstanceType:
        """One merged entry; `given` (keys of an entry) overrides facts the catalog cannot know, e.g. the GPU
        of a `local` machine. SageMaker HyperPod's `ml.` prefix is accepted."""
        key = name[3:] if name.startswith("ml.") else name
        if key not in self._data["types"]:
            known = ", ".join(self.names())
            raise CatalogError(f"instance type {name!r} is not in the catalog; known: {known}")
        merged = _merge(self._data, key)
        if given:
            _check_entry(f"given facts for {key}", given)
            for item, value in given.items():
                merged[item] = {**merged[item], **value} if item in _NESTED else value
            _check_merged(key, merged)
        family = _family_of(key)
        sources = self._data["families"][family]["sources"] if family else []
        return InstanceType(name=key, family=family, sources=tuple(sources), **merged)

    def find(self, name: str) -> InstanceType | None:
        """Like get, but None for a type the catalog does not hold (the inventory sees any EC2 type)."""
        try:
            return self.get(name)
        except CatalogError:
            return None

    def family_generation(self, family: str) -> str | None:
        """GPU generation of an instance family (volta, ..., blackwell); None when unknown or not NVIDIA."""
        entry = self._data["families"].get(family)
        if entry is None:
            return None
        nvidia = entry.get("nvidia", self._data["defaults"]["nvidia"])
        return entry.get("gpu_generation") if nvidia else None

    def family_facts(self, family: str) -> dict[str, Any]:
        """Family-level facts (generation, NVSwitch, ...) merged over defaults, for family-keyed consumers."""
        if family not in self._data["families"]:
            raise CatalogError(
                f"instance family {family!r} is not in the catalog; known: {', '.join(self.families())}"
            )
        entry = {k: v for k, v in self._data["families"][family].items() if k not in _FAMILY_ONLY}
        return {**copy.deepcopy(dict(self._data["defaults"])), **copy.deepcopy(entry), "family": family}

    def health_table(self) -> dict[str, Any]:
        """node_health.py's table: `defaults` (the keys it accepts overrides for) and one row per type."""
        rows = {name: self.get(name).health_expectations() for name in self.names()}
        return {"defaults": dict(rows["local"]), "types": rows}

    def as_data(self) -> dict[str, Any]:
        """The raw, validated document (what the generated module embeds)."""
        return copy.deepcopy(self._data)


_DEFAULT: Catalog | None = None


def default() -> Catalog:
    """The collection's catalog, from the generated module; validated once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog_data

        _DEFAULT = Catalog(instance_catalog_data.CATALOG)
    return _DEFAULT


def load_file(path: str) -> Catalog:
    """Read and validate the YAML source (controller only: PyYAML is not there on every node)."""
    # Imported here: the rest of this file also loads by path, without the collection (bench/catalog_peak.py).
    import yaml
    from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml

    try:
        data = strict_yaml.load(path)
    except yaml.YAMLError as err:
        raise CatalogError(f"instance catalog {path}: not YAML: {err}") from err
    return Catalog(data)


def render_module(catalog: Catalog) -> str:
    """Source of instance_catalog_data.py: the catalog as JSON text in a Python module, so it ships with
    module_utils (JSON inside a string keeps the generated file stable under the formatter)."""
    import json

    text = json.dumps(catalog.as_data(), indent=1, sort_keys=True)
    return (
        "# Copyright: trainstack maintainers\n"
        "# Apache License 2.0 (see galaxy.yml)\n"
        '"""Generated from stacks/instance_types.yml by `make instance-catalog`; do not edit by hand.\n\n'
        "Ansible ships module_utils to targets as Python only, so the catalog travels in this form; a unit\n"
        'test fails when it differs from the YAML."""\n\n'
        "from __future__ import annotations\n\n"
        "import json\n"
        "from typing import Any\n\n"
        f'_TEXT = r"""\n{text}\n"""\n\n'
        "CATALOG: dict[str, Any] = json.loads(_TEXT)\n"
    )
