"""Verifier for roles/artifact: what landed on the node, what was refused, what the mirror was asked for."""

import os
import re
from pathlib import Path

import pytest
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
MIRROR = yaml.safe_load((SCENARIO / "vars" / "mirror.yml").read_text())
FILES = {f["name"]: f for f in MIRROR["artifact_scenario_files"]}
CACHE = "/var/cache/trainstack/artifacts"
ACCESS_LOG = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "mirror-access.log"
REQUEST = re.compile(r'^(?P<client>\S+) - - \[[^]]+\] "GET (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def _requests() -> list[tuple[str, str, str]]:
    lines = ACCESS_LOG.read_text().splitlines()
    return [m.group("client", "path", "status") for m in map(REQUEST.match, lines) if m]


@pytest.mark.parametrize("name", ["typing-extensions", "filelock"])
def test_accepted_file_is_the_pinned_one(host, name):
    art = FILES[name]
    path = f"{CACHE}/{name}/{art['file']}"
    f = host.file(path)
    assert f.is_file
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)
    assert f.sha256sum == art["sha256"]
    # A whole wheel of the version named: every member's CRC holds and its metadata says so.
    check = (
        "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; "
        "print(z.read([n for n in z.namelist() if n.endswith('.dist-info/METADATA')][0]).decode())"
    )
    metadata = host.check_output(f'python3 -c "{check}" {path}').splitlines()
    assert f"Version: {art['file'].split('-')[1]}" in metadata


def test_cache_directory(host):
    d = host.file(CACHE)
    assert (d.is_directory, d.user, d.group, d.mode) == (True, "root", "root", 0o755)


def test_refused_downloads_leave_nothing(host):
    # The mismatched download was written to a temporary file beside its destination: gone, with no file of
    # its own. The unpinned one never got a directory.
    assert host.check_output(f"find {CACHE}/mpmath -mindepth 1") == ""
    assert not host.file(f"{CACHE}/mpmath-unpinned").exists
    assert host.check_output(f"find {CACHE} -name '.artifact-*'") == ""
    kept = sorted(host.check_output(f"find {CACHE} -type f -printf '%P\\n'").split())
    assert kept == sorted(f"{n}/{FILES[n]['file']}" for n in ("typing-extensions", "filelock"))


def test_mirror_was_asked_for_the_rewritten_paths_only(host):
    address = host.check_output("hostname -I").split()[0]
    requests = _requests()
    assert requests, f"no request in {ACCESS_LOG}"
    assert {request[0] for request in requests} == {address}
    paths = [request[1] for request in requests]
    # Each accepted file once: the second converge found it in place and asked for nothing.
    for name in ("typing-extensions", "filelock"):
        assert paths.count(f"/{name}/{FILES[name]['file']}") == 1
    # The mismatched one was downloaded (then refused) on every run; the unpinned one never.
    assert paths.count(f"/mpmath/{FILES['mpmath']['file']}") >= 1
    assert not [p for p in paths if p.startswith("/mpmath-unpinned/")]
    assert set(paths) == {f"/{n}/{FILES[n]['file']}" for n in ("typing-extensions", "filelock", "mpmath")}
    assert {request[2] for request in requests} == {"200"}
