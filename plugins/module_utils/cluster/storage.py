# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Where a spec'd cluster keeps training data and checkpoints: the launch's defaults, derived from the spec.

Why here: the spec already says where the shared file system is mounted
(``shared_storage.fsx_lustre.mount_dir``) and which S3 prefix it is linked to (``data_repository_path``);
the foundation links that prefix to one directory of the file system (``data_repository_file_system_path``,
default ``/data``). So the directory a dataset uploaded to the prefix appears in is known before the cluster
exists, and so is a directory every node can write checkpoints to. Deriving them once, here, and carrying
them as tags (aws/cluster_tags.py) on what every renderer makes lets a launch on the cluster find them
without the user typing a path.

- ``data_dir``: ``shared_storage.data_dir`` when given, else ``<mount_dir><data_repository_file_system_path>``
  when the file system is linked to S3. ParallelCluster, when it makes the file system itself with
  ``ImportPath`` (a type other than PERSISTENT_2, without the foundation's file system), imports the prefix
  at the file system's root: the renderer says so with ``import_at_root``.
- ``checkpoint_dir``: ``shared_storage.checkpoint_dir`` when given, else
  ``<mount_dir>/trainstack/checkpoints`` (where the launch put them under its shared directory before). The
  launch adds the job's name.

Both must lie under a mount the spec declares (the FSx mount directory, or ``/home`` with ``efs_home``): a
path outside would be a node's own disk, which the other nodes do not see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import cluster_tags

# Where the foundation links the bucket when the spec names no directory (aws_foundation's default).
DEFAULT_FILE_SYSTEM_PATH = "/data"
CHECKPOINT_SUBDIR = "trainstack/checkpoints"
EFS_HOME = "/home"
_PATH = {"type": "string", "pattern": cluster_tags.PATH.pattern}
# The spec's storage keys (cluster_spec.SCHEMA includes them): one place for their shape and descriptions.
FILE_SYSTEM_PATH_SCHEMA = {
    **_PATH,
    "description": "The file system's directory linked to data_repository_path (default: /data); the "
    "launch's data default is mount_dir plus this.",
}
DATA_DIR_SCHEMA = {
    **_PATH,
    "description": "The launch's data default (default: the linked directory, when the file system is "
    "linked to S3); under a declared mount.",
}
CHECKPOINT_DIR_SCHEMA = {
    **_PATH,
    "description": "Where the launch writes checkpoints, one directory per job (default: "
    "<fsx mount_dir>/trainstack/checkpoints); under a declared mount.",
}


def _join(mount: str, path: str) -> str:
    """A directory of the file system as the nodes see it: ``/fsx`` + ``/data`` is ``/fsx/data``."""
    inner = path.strip("/")
    return f"{mount.rstrip('/')}/{inner}" if inner else mount


def mounts(spec: Mapping[str, Any]) -> dict[str, str]:
    """The shared mounts a normalised spec declares, by the key that declares them."""
    storage = spec.get("shared_storage") or {}
    found = {}
    fsx = storage.get("fsx_lustre")
    if fsx:
        found["shared_storage.fsx_lustre.mount_dir"] = fsx["mount_dir"]
    if storage.get("efs_home"):
        found["shared_storage.efs_home"] = EFS_HOME
    return found


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount == "/" else f"{mount}/")


def problems(spec: Mapping[str, Any]) -> list[str]:
    """The storage keys' rules beyond the schema, each naming its key (a normalised spec's)."""
    storage = spec.get("shared_storage") or {}
    fsx = storage.get("fsx_lustre") or {}
    found = []
    linked = fsx.get("data_repository_file_system_path")
    if linked is not None:
        where = "shared_storage.fsx_lustre.data_repository_file_system_path"
        problem = cluster_tags.path_problem(linked)
        if problem:
            found.append(f"{where}: {problem}")
        if not fsx.get("data_repository_path"):
            found.append(f"{where}: links nothing without data_repository_path; set it or remove this key")
    declared = mounts(spec)
    for key in ("data_dir", "checkpoint_dir"):
        path = storage.get(key)
        if path is None:
            continue
        where = f"shared_storage.{key}"
        problem = cluster_tags.path_problem(path)
        if problem:
            found.append(f"{where}: {problem}")
        elif not any(_under(path, mount) for mount in declared.values()):
            named = ", ".join(f"{mount} ({name})" for name, mount in declared.items()) or "none"
            found.append(
                f"{where}: {path} is not under a mount the spec declares, so the other nodes would not see "
                f"it; declared: {named}"
            )
    return found


def defaults(spec: Mapping[str, Any], *, import_at_root: bool = False) -> dict[str, str]:
    """The launch's storage defaults of a normalised spec: ``data_dir`` and ``checkpoint_dir``, each only
    when the spec gives or implies one (a spec without shared storage gives none)."""
    storage = spec.get("shared_storage") or {}
    fsx = storage.get("fsx_lustre")
    found: dict[str, str] = {}
    if storage.get("data_dir"):
        found["data_dir"] = storage["data_dir"]
    elif fsx and fsx.get("data_repository_path"):
        found["data_dir"] = _join(fsx["mount_dir"], "/" if import_at_root else file_system_path(fsx))
    if storage.get("checkpoint_dir"):
        found["checkpoint_dir"] = storage["checkpoint_dir"]
    elif fsx:
        found["checkpoint_dir"] = _join(fsx["mount_dir"], CHECKPOINT_SUBDIR)
    return found


def file_system_path(fsx: Mapping[str, Any]) -> str:
    """The directory the data repository association links (the foundation's and ParallelCluster's)."""
    return str(fsx.get("data_repository_file_system_path", DEFAULT_FILE_SYSTEM_PATH))


def tags(spec: Mapping[str, Any], *, import_at_root: bool = False) -> dict[str, str]:
    """The storage defaults as the tags every renderer adds to the cluster's own tags."""
    return cluster_tags.storage_tags(defaults(spec, import_at_root=import_at_root))
