# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""A registry's login written into a containers auth file (containers-auth.json, what `buildah login` writes).

Why here and not in a playbook: a registry password that a module returns is in the module's result, and from
there in registered variables, callbacks and logs unless every task that touches it remembers no_log. The
module that obtains a password writes it straight into the auth file that buildah, podman and skopeo read
(mode 0600, replaced atomically, other registries' entries kept) and returns only where it went.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.files.atomic import write_text_atomic


class RegistryAuthError(ValueError):
    """The auth file exists but is not a containers auth file (a JSON object whose `auths` is an object)."""


def entry(username: str, password: str) -> dict[str, str]:
    """One registry's entry as `buildah login` writes it: base64 of `<user>:<password>`."""
    return {"auth": base64.b64encode(f"{username}:{password}".encode()).decode("ascii")}


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise RegistryAuthError(f"{path}: not JSON ({exc}); not overwritten") from exc
    if not isinstance(data, dict) or not isinstance(data.get("auths", {}), dict):
        raise RegistryAuthError(f"{path}: not a containers auth file (an object with an 'auths' object)")
    return data


def write(path: str, host: str, username: str, password: str, dry_run: bool = False) -> bool:
    """Put `host`'s login into the auth file at `path` (made, 0600, when missing); True when it changed (or,
    with `dry_run`, would change: nothing is written then).

    The file is replaced atomically, so buildah never reads half of it; its other keys and registries stay."""
    data = _read(path)
    auths = dict(data.get("auths") or {})
    wanted = entry(username, password)
    if auths.get(host) == wanted and os.path.exists(path) and os.stat(path).st_mode & 0o777 == 0o600:
        return False
    if dry_run:
        return True
    auths[host] = wanted
    text = json.dumps({**data, "auths": auths}, indent=2, sort_keys=True) + "\n"
    write_text_atomic(path, text, 0o600, dir_mode=0o700)
    return True
