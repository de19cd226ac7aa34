#!/usr/bin/env python3
"""Record in a stack's lock file the digests that can be checked without the vendor hosts.

`make mirror` locks an artifact by downloading it; where the vendor host is out of reach (or the file is a
multi-GB wheel), two other sources vouch for the bytes: PyPI's simple index, which publishes the sha256
and size of every file on files.pythonhosted.org (over HTTPS, the index pip itself checks hashes against),
and a local copy of the very file (a wheelhouse such as the lab's /opt/wheels), hashed here. Each lock entry
says which one it came from (`evidence`). A digest that disagrees with the stack's own is an error.

    .venv/bin/python scripts/stack_lock.py stacks/$(cat stacks/current).yml --local /opt/wheels
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.module_utils.artifact import artifact_fetch as af  # noqa: E402 - path set above
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm  # noqa: E402

PYPI_FILES = "files.pythonhosted.org"
_WHEEL_RE = re.compile(r"^(?P<project>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-")


def pypi_digest(url: str) -> tuple[str, int] | None:
    """sha256 and size PyPI's simple index (PEP 691 JSON) publishes for the file at `url`, or None."""
    name = af.file_name(url)
    match = _WHEEL_RE.match(name)
    if not match:
        return None
    project = re.sub(r"[-_.]+", "-", match["project"]).lower()
    request = urllib.request.Request(
        f"https://pypi.org/simple/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        index = json.load(response)
    for entry in index.get("files", []):
        if entry["filename"] == name and entry.get("hashes", {}).get("sha256"):
            return entry["hashes"]["sha256"], int(entry["size"])
    return None


def local_digest(url: str, directories: list[Path]) -> tuple[str, int, Path] | None:
    """sha256 and size of a local copy of the file (same file name) in one of `directories`."""
    for directory in directories:
        path = directory / af.file_name(url)
        if path.is_file():
            return af.sha256_file(str(path)), path.stat().st_size, path
    return None


def evidence_for(art: dict[str, Any], directories: list[Path]) -> dict[str, Any] | None:
    """The lock entry one artifact can get here, or None when nothing reachable vouches for it."""
    found = local_digest(art["url"], directories)
    if found:
        return {"sha256": found[0], "size": found[1], "evidence": f"hashed local copy {found[2].name}"}
    if urllib.parse.urlparse(art["url"]).hostname == PYPI_FILES:
        published = pypi_digest(art["url"])
        if published:
            return {
                "sha256": published[0],
                "size": published[1],
                "evidence": "PyPI simple index (PEP 691) digest",
            }
    return None


def build_lock(stack: dict[str, Any], old: dict[str, Any], directories: list[Path]) -> dict[str, Any]:
    """The new lock: old entries still valid for their URL are kept as they are (idempotent re-runs)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries: dict[str, Any] = {}
    for art in sm.all_artifacts(stack):
        previous = old.get("artifacts", {}).get(art["name"])
        found = evidence_for(art, directories)
        if found is None:
            continue
        if art.get("sha256") and found["sha256"] != art["sha256"]:
            raise SystemExit(
                f"{art['name']}: {found['evidence']} gives sha256 {found['sha256']}, "
                f"the stack pins {art['sha256']}"
            )
        if previous and previous.get("url") == art["url"] and previous.get("sha256") == found["sha256"]:
            entries[art["name"]] = previous
            continue
        entries[art["name"]] = {"url": art["url"], **found, "recorded": now}
    return {"format": af.LOCK_FORMAT, "stack": stack["id"], "artifacts": dict(sorted(entries.items()))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stack", type=Path)
    parser.add_argument("--local", type=Path, action="append", default=[], help="directory of local copies")
    args = parser.parse_args()
    stack = yaml.safe_load(args.stack.read_text())
    sm.validate_stack(stack, str(args.stack))
    lock_path = args.stack.parent / "locks" / f"{stack['id']}.lock.json"
    lock = build_lock(stack, af.load_lock(str(lock_path)), args.local)
    lock_path.write_text(json.dumps(lock, indent=2) + "\n")
    print(f"{lock_path}: {len(lock['artifacts'])} of {len(sm.all_artifacts(stack))} artifacts locked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
