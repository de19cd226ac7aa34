#!/usr/bin/env python3
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Snapshot the rules of the pinned ParallelCluster package that a cluster spec can break, as JSON.

Why a snapshot: module_utils/cluster/target_limits.py holds ParallelCluster's limits as data, and `make
test` runs without ParallelCluster's virtualenv (it pins its own boto3 and marshmallow). This script runs
inside that virtualenv (`make pcluster-venv`) and writes what the unit tests compare the table with:

- `constants`: every limit-like constant (MAX_*, MIN_*, *_MAX_LENGTH, *_REGEX, NAME_*) of pcluster.constants
  and pcluster.validators.cluster_validators, with its value and how we treat it (`mirrored` by the constant
  of target_limits named, or why the spec cannot reach it);
- `validators`: every validator the cluster configuration registers, with the sha256 of its source and how
  we treat it (`needs AWS`, found from its source; `mirrored` by the check named; or why the spec cannot
  reach it). One this script does not classify is written as `unreviewed`, which the unit tests refuse;
- `literals`: the values written inside the validators we mirror (reserved names and directories);
- `schema`: the marshmallow validators (Range, Length, OneOf, Regexp) of every field our renderer fills, the
  fields being the leaves of the rendered configurations given on the command line.

A new ParallelCluster release changes this file: the slow test tests/integration/cluster/
test_pcluster_limits.py says when the committed one is stale, and the unit tests then say which rule
target_limits lacks.

Usage: pcluster_limits.py [--write FILE | --check FILE] CONFIG.yaml...
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

LIMIT_NAME = re.compile(r"^(MAX|MIN)_|MAX_LENGTH|_REGEX$|^NAME_")
NEEDS_AWS = re.compile(r"AWSApi|boto3|describe_|get_instance_type_info")

# Constants: the attribute of target_limits that mirrors each one, or why the spec cannot reach it.
CONSTANTS = {
    "PCLUSTER_NAME_MAX_LENGTH": "mirrored: PCLUSTER_NAME_MAX_LENGTH",
    "PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING": "mirrored: PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING",
    "PCLUSTER_NAME_REGEX": "mirrored: PCLUSTER_NAME_REGEX",
    "PCLUSTER_AMI_ID_REGEX": "mirrored: PCLUSTER_AMI_ID_REGEX",
    "PCLUSTER_TAG_VALUE_REGEX": "mirrored: PCLUSTER_TAG_VALUE_REGEX",
    "MAX_NUMBER_OF_QUEUES": "mirrored: MAX_NUMBER_OF_QUEUES",
    "MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER": "mirrored: MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER",
    "MAX_COMPUTE_RESOURCES_PER_QUEUE": "not reachable: one compute resource per queue",
    "MAX_NUMBER_OF_LOGIN_NODE_POOLS": "not reachable: at most one login node pool",
    "NAME_REGEX": "mirrored: PCLUSTER_QUEUE_NAME_REGEX",
    "NAME_MAX_LENGTH": "mirrored: PCLUSTER_QUEUE_NAME_MAX_LENGTH",
    "SHARED_STORAGE_NAME_MAX_LENGTH": "not reachable: storage names are fixed (fsx, home)",
    "HOST_NAME_MAX_LENGTH": "not reachable: only with a custom DNS domain (Scheduling.SlurmSettings.Dns)",
    "CLUSTER_NAME_AND_CUSTOM_DOMAIN_NAME_MAX_LENGTH": "not reachable: only with a custom DNS domain",
    "FSX_VOLUME_ID_REGEX": "not reachable: no FSx for ONTAP/OpenZFS volume",
    "FILE_CACHE_ID_REGEX": "not reachable: no File Cache",
    "MIN_SLURM_NODE_PRIORITY": "not reachable: node priorities are not rendered",
    "MAX_SLURM_NODE_PRIORITY": "not reachable: node priorities are not rendered",
    "MIN_MEMORY_ABSOLUTE_DIFFERENCE": "not reachable: flexible instance types are not rendered",
    "MAX_EBS_COUNT": "not reachable: no shared EBS volume",
    "PCLUSTER_IMAGE_NAME_REGEX": "not reachable: build-image only",
    "PCLUSTER_IMAGE_ID_REGEX": "not reachable: build-image only",
    "MAX_TAGS_COUNT": "not reachable: one cluster tag",
    "IAM_ROLE_REGEX": "not reachable: IAM comes from the foundation, not the spec",
    "IAM_INSTANCE_PROFILE_REGEX": "not reachable: IAM comes from the foundation, not the spec",
    "IAM_POLICY_REGEX": "not reachable: IAM comes from the foundation, not the spec",
}

# Validators that run offline: the check of ours that mirrors each one, or why the spec cannot reach it.
_NOT_RENDERED = "not reachable: the renderer writes no such setting"
VALIDATORS = {
    "ClusterNameValidator": "mirrored: target_limits.RULES",
    "NameValidator": "mirrored: target_limits.RULES",
    "MaxCountValidator": "mirrored: target_limits.COUNT_LIMITS",
    "SharedStorageMountDirValidator": "mirrored: target_limits.RULES",
    "ComputeResourceSizeValidator": "mirrored: cluster_spec._queue_problems, cluster_spec._capacity_problems",
    "DuplicateNameValidator": "mirrored: cluster_spec._cluster_problems (queue names); the rest are fixed",
    "FsxStorageCapacityValidator": "mirrored: cluster_spec._fsx_problems",
    "FsxPersistentOptionsValidator": "mirrored: cluster_spec._fsx_problems (throughput defaults filled)",
    "FsxDraValidator": "mirrored: pcluster_render._fsx (an association or an import path, never both)",
    "FsxS3Validator": "mirrored: pcluster_render._fsx (only ImportPath, no chunk size or policy)",
    "SharedStorageNameValidator": "not reachable: storage names are fixed (fsx, home)",
    "SchedulerValidator": "not reachable: the scheduler is always slurm",
    "OsCustomAmiValidator": "not reachable: every spec OS has an official AMI, and a custom AMI is given",
    "ArchitectureOsValidator": "not reachable: every spec OS runs on both architectures",
    "EfaOsArchitectureValidator": "not reachable: no OS is excluded from EFA",
    "FsxArchitectureOsValidator": "not reachable: FSx takes every supported OS on both architectures",
    "IntelHpcArchitectureValidator": _NOT_RENDERED,
    "IntelHpcOsValidator": _NOT_RENDERED,
    "DetailedMonitoringValidator": "warning only: detailed monitoring costs more",
    "SchedulableMemoryValidator": _NOT_RENDERED,
    "RootVolumeSizeValidator": _NOT_RENDERED,
    "RootVolumeEncryptionConsistencyValidator": "not reachable: root volumes are left at their defaults",
    "InstanceArchitectureCompatibilityValidator": "mirrored: cluster_spec._arch_problems (queues)",
    "NumberOfStorageValidator": "not reachable: at most one FSx and one EFS",
    "DuplicateMountDirValidator": "not reachable: the two file systems mount on /fsx-like dirs and /home",
    "OverlappingMountDirValidator": "not reachable: /home and a mount_dir under / that is not /home",
    "SharedFileCacheNotHomeValidator": _NOT_RENDERED,
    "SharedStorageEfsSettingsValidator": _NOT_RENDERED,
    "SharedEbsPerformanceBottleNeckValidator": _NOT_RENDERED,
    "DeletionPolicyValidator": _NOT_RENDERED,
    "EfaPlacementGroupValidator": "warning only: EFA without a placement group",
    "EfaMultiAzValidator": "not reachable: one subnet per queue",
    "ManagedFsxMultiAzValidator": "not reachable: one subnet per queue",
    "UnmanagedFsxMultiAzValidator": "not reachable: one subnet per queue",
    "MultiAzPlacementGroupValidator": "not reachable: one subnet per queue",
    "MultiAzEbsVolumeValidator": "not reachable: one subnet per queue",
    "MultiAzRootVolumeValidator": "not reachable: one subnet per queue",
    "QueueSubnetsValidator": "not reachable: one subnet per queue",
    "SingleInstanceTypeSubnetValidator": "not reachable: one subnet per queue",
    "MixedSecurityGroupOverwriteValidator": "not reachable: every queue takes the same security groups",
    "ComputeResourceTagsValidator": "not reachable: only the cluster carries a tag",
    "SlurmNodePrioritiesWarningValidator": _NOT_RENDERED,
    "CustomSlurmSettingsValidator": _NOT_RENDERED,
    "CustomSlurmSettingsIncludeFileOnlyValidator": _NOT_RENDERED,
    "CustomSlurmNodeNamesValidator": _NOT_RENDERED,
    "DatabaseUriValidator": "not reachable: the database comes from the foundation",
    "ExternalSlurmdbdRequiresCustomMungeKey": _NOT_RENDERED,
    "ExternalSlurmdbdTrafficNotEncrypted": _NOT_RENDERED,
    "ExternalSlurmdbdVsDatabaseIncompatibility": _NOT_RENDERED,
    "AdditionalSssdConfigsValidator": _NOT_RENDERED,
    "DomainAddrValidator": _NOT_RENDERED,
    "DomainNameValidator": _NOT_RENDERED,
    "LdapTlsReqCertValidator": _NOT_RENDERED,
    "EbsVolumeIopsValidator": _NOT_RENDERED,
    "EbsVolumeThroughputIopsValidator": _NOT_RENDERED,
    "EbsVolumeThroughputValidator": _NOT_RENDERED,
    "EbsVolumeTypeSizeValidator": _NOT_RENDERED,
    "EfsAccessPointOptionsValidator": _NOT_RENDERED,
    "EfsMountOptionsValidator": _NOT_RENDERED,
    "FsxBackupOptionsValidator": _NOT_RENDERED,
    "FsxStorageTypeOptionsValidator": "not reachable: SSD storage only (no StorageType rendered)",
    "KmsKeyIdEncryptedValidator": _NOT_RENDERED,
    "LogRotationValidator": _NOT_RENDERED,
    "IamPolicyValidator": "not reachable: IAM comes from the foundation, not the spec",
    "IamResourcePrefixValidator": _NOT_RENDERED,
    "ArnServiceAndResourceValidator": "not reachable: ARNs come from the foundation, not the spec",
    "FeatureRegionValidator": "region-specific feature list, published by AWS at run time",
    "RegionValidator": "region list published by AWS at run time; the spec checks botocore's regions",
    "HeadNodeLaunchTemplateValidator": "not reachable: a dry run of RunInstances",
    "PlacementGroupCapacityTypeValidator": "not reachable: the placement group comes from the foundation",
    "CapacityReservationResourceGroupValidator": _NOT_RENDERED,
}
MIRRORED_LITERALS = ("NameValidator", "SharedStorageMountDirValidator")


def _registered() -> set[str]:
    """Every validator class the cluster configuration registers (pcluster.config.cluster_config)."""
    import pcluster.config.cluster_config as config

    return set(re.findall(r"_register_validator\(\s*(\w+)", inspect.getsource(config)))


def _validator_classes() -> dict[str, type]:
    from pcluster.validators.common import AsyncValidator, Validator

    def below(cls: type) -> set[type]:
        return {sub for direct in cls.__subclasses__() for sub in {direct, *below(direct)}}

    return {cls.__name__: cls for cls in below(Validator) | below(AsyncValidator)}


def validators() -> dict[str, dict[str, str]]:
    classes = _validator_classes()
    found = {}
    for name in sorted(_registered() & set(classes)):
        source = inspect.getsource(classes[name])
        status = "needs AWS" if NEEDS_AWS.search(source) else VALIDATORS.get(name, "unreviewed")
        found[name] = {"sha256": hashlib.sha256(source.encode()).hexdigest(), "status": status}
    return found


def constants() -> dict[str, dict[str, Any]]:
    import pcluster.constants as pc
    import pcluster.validators.cluster_validators as cv

    found: dict[str, dict[str, Any]] = {}
    for module in (pc, cv):
        for name, value in vars(module).items():
            if not name.isupper() or isinstance(value, bool) or not isinstance(value, int | str):
                continue
            if LIMIT_NAME.search(name):
                found[name] = {"value": value, "status": CONSTANTS.get(name, "unreviewed")}
    return dict(sorted(found.items()))


def _strings(code: Any) -> list[str]:
    """Every string constant in a function's code, nested tuples and inner functions included."""
    found: list[str] = []
    for const in code.co_consts:
        if isinstance(const, str):
            found.append(const)
        elif isinstance(const, tuple):
            found += [item for item in const if isinstance(item, str)]
        elif hasattr(const, "co_consts"):
            found += _strings(const)
    return found


def literals() -> dict[str, list[str]]:
    """Reserved names (the `^name$` patterns) and reserved directories of the validators we mirror."""
    classes = _validator_classes()
    found = {}
    for name in MIRRORED_LITERALS:
        strings = _strings(classes[name]._validate.__code__)
        reserved = [s[1:-1] for s in strings if re.fullmatch(r"\^[a-z]+\$", s)]
        reserved += [s for s in strings if re.fullmatch(r"/[a-z0-9_/]+", s)]
        found[name] = reserved
    return found


def leaf_paths(data: Any, path: str = "") -> set[str]:
    """Dotted paths of every scalar in a rendered configuration; [] stands for every item of a list."""
    if isinstance(data, dict):
        return {p for key, value in data.items() for p in leaf_paths(value, f"{path}.{key}" if path else key)}
    if isinstance(data, list):
        return {p for item in data for p in leaf_paths(item, f"{path}[]")}
    return {path}


def _field(schema: Any, key: str) -> Any:
    for name, field in schema.fields.items():
        if (field.data_key or name) == key:
            return field
    raise KeyError(key)


def _nested(field: Any) -> Any:
    from marshmallow import fields

    while isinstance(field, fields.List):
        field = field.inner
    if isinstance(field, fields.Nested):
        nested = field.nested
        return nested() if isinstance(nested, type) else nested
    return None


def schema_rules(paths: set[str]) -> dict[str, list[str]]:
    """The marshmallow validators of each rendered field, as text; a path the schema lacks is reported."""
    from pcluster.schemas.cluster_schema import ClusterSchema

    found = {}
    for path in sorted(paths):
        schema: Any = ClusterSchema(cluster_name="snapshot")
        field = None
        try:
            for part in path.replace("[]", "").split("."):
                if field is not None:
                    schema = _nested(field)
                field = _field(schema, part)
        except (KeyError, AttributeError, TypeError):
            found[path] = ["not in ParallelCluster's schema"]
            continue
        found[path] = [_describe(v) for v in getattr(field, "validators", [])]
    return found


def _describe(validator: Any) -> str:
    """Range(min=1, max=None), Length(..), OneOf([..]), Regexp('..'): the rule, without its message."""
    kind = type(validator).__name__
    if kind == "Range":
        return f"Range(min={validator.min}, max={validator.max})"
    if kind == "Length":
        return f"Length(min={validator.min}, max={validator.max})"
    if kind == "OneOf":
        return f"OneOf({sorted(validator.choices)})"
    if kind == "Regexp":
        return f"Regexp({validator.regex.pattern})"
    return kind


def snapshot(configs: list[Path]) -> dict[str, Any]:
    import yaml
    from pcluster.utils import get_installed_version

    paths: set[str] = set()
    for config in configs:
        paths |= leaf_paths(yaml.safe_load(config.read_text(encoding="utf-8")))
    return {
        "aws-parallelcluster": get_installed_version(),
        "constants": constants(),
        "validators": validators(),
        "literals": literals(),
        "schema": schema_rules(paths),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "configs", nargs="+", type=Path, help="rendered configurations (make cluster-configs)"
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, help="write the snapshot to this file")
    mode.add_argument("--check", type=Path, help="exit 1 when this file differs from the snapshot")
    args = parser.parse_args(argv)
    text = json.dumps(snapshot(args.configs), indent=1, sort_keys=True) + "\n"
    if args.write:
        args.write.write_text(text, encoding="utf-8")
        return 0
    if args.check.read_text(encoding="utf-8") != text:
        print(
            f"{args.check} is stale: run scripts/pcluster_limits.py --write {args.check} ...", file=sys.stderr
        )
        print(text)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
