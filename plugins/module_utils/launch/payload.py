# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The launch's payload: a test case's directory and the packages it includes, packed reproducibly.

The payload is staged under its content's hash (a launch whose files did not change finds it staged), so the
archive of the same files must be the same bytes on every controller and every day: members in name order,
modification times at the epoch, owner and group root by number, no ``__pycache__``. Packed in the
controller's own process, where a ``tar`` and a ``sha256sum`` cost a launch a module run.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Sequence

SKIPPED = frozenset({"__pycache__"})
_CHUNK = 1 << 20


def _members(root: str, arcname: str) -> Iterator[tuple[str, str]]:
    """(path, name in the archive) of ``root`` and everything under it, a directory before its entries and
    entries in name order; ``__pycache__`` directories are left out with their contents."""
    yield root, arcname
    if os.path.isdir(root) and not os.path.islink(root):
        for name in sorted(os.listdir(root)):
            if name in SKIPPED:
                continue
            yield from _members(os.path.join(root, name), f"{arcname}/{name}")


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """The member's header without what differs between machines: time, owner names and ids."""
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = stat.S_IMODE(info.mode)
    return info


def write_payload(source: str, includes: Sequence[tuple[str, str]], dest: str) -> str:
    """Pack ``source`` (as ``.``) and each include (``directory``/``name`` as ``name``) into ``dest``, written
    whole or not at all; the archive's sha256, hex."""
    members = [*_members(source, "."), *(m for d, n in includes for m in _members(os.path.join(d, n), n))]
    fd, tmp = tempfile.mkstemp(prefix=".payload-", dir=os.path.dirname(dest) or ".")
    try:
        with (
            os.fdopen(fd, "wb") as handle,
            tarfile.open(fileobj=handle, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):
            for path, arcname in members:
                info = _normalised(tar.gettarinfo(path, arcname))
                if info.isreg():
                    with open(path, "rb") as content:
                        tar.addfile(info, content)
                else:
                    tar.addfile(info)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return file_sha256(dest)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
