"""moto_server whose FSx for Lustre file systems carry a MountName, as AWS's do.

Why: moto 5's FSx backend echoes the request's LustreConfiguration and leaves out the MountName that AWS
answers for every Lustre file system (`<dns_name>@tcp:/<MountName>` is how a client mounts it). The
foundation records what FSx answers, and the cluster steps refuse a spec with shared FSx whose record has no
mount name, so a walkthrough on moto needs the attribute. This script adds it inside the moto server process,
by AWS's rule: `fsx` for a SCRATCH_1 file system, else eight random lowercase letters and digits. Nothing in
the collection supplies a mount name of its own; run it in place of moto_server (tests.support.start_moto's
``server``).
"""

from __future__ import annotations

import secrets
import string
import sys
from typing import Any

from moto.fsx import models
from moto.server import main

ALPHABET = string.ascii_lowercase + string.digits
_moto_init = models.FileSystem.__init__


def aws_mount_name(lustre_configuration: dict[str, Any]) -> str:
    """The MountName AWS gives a new Lustre file system of this configuration."""
    if lustre_configuration.get("DeploymentType") == "SCRATCH_1":
        return "fsx"
    return "".join(map(secrets.choice, [ALPHABET] * 8))


def _init_with_mount_name(self: models.FileSystem, *args: Any, **kwargs: Any) -> None:
    _moto_init(self, *args, **kwargs)
    if self.file_system_type == "LUSTRE":
        config = dict(self.lustre_configuration or {})
        config.setdefault("MountName", aws_mount_name(config))
        self.lustre_configuration = config


models.FileSystem.__init__ = _init_with_mount_name

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
