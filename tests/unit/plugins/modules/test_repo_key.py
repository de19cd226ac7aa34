"""trainstack.cluster.repo_key run by Ansible: a key is installed only when its fingerprint is pinned."""

import json
import subprocess

import pytest

from tests.support import LOCALHOST_ARGS, VENV_BIN, run

REPOSITORY = "stand-in vendor (file:///srv/repo)"


def repo_key(**args):
    """One real module run on localhost (no inventory file: the module needs none)."""
    return run(
        [
            str(VENV_BIN / "ansible"),
            "all",
            *LOCALHOST_ARGS,
            "-m",
            "trainstack.cluster.repo_key",
            "-a",
            json.dumps({"repository": REPOSITORY, **args}),
        ],
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory):
    """A real armored key made by gpg, and its fingerprint as gpg reports it."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    gpg = ["gpg", "--batch", "--quiet", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "stand-in repository", "ed25519", "sign", "never"], env=env, check=True
    )
    key = home / "key.asc"
    key.write_bytes(
        subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    )
    colons = subprocess.run(
        [*gpg, "--with-colons", "--fingerprint"], env=env, check=True, capture_output=True, text=True
    ).stdout
    return key, next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))


def test_pinned_key_is_installed_once(signing_key, tmp_path):
    key, fingerprint = signing_key
    dest = tmp_path / "keyring.asc"
    first = repo_key(url=f"file://{key}", dest=str(dest), fingerprints=[fingerprint.lower()])
    assert first.returncode == 0, first.stdout
    assert "CHANGED" in first.stdout and dest.read_bytes() == key.read_bytes()
    again = repo_key(url=f"file://{key}", dest=str(dest), fingerprints=[fingerprint])
    assert again.returncode == 0 and "SUCCESS" in again.stdout, again.stdout


def test_other_fingerprint_is_refused_naming_the_repository(signing_key, tmp_path):
    key, fingerprint = signing_key
    dest = tmp_path / "keyring.asc"
    dest.write_text("the key installed before\n")
    pinned = "EB693B3035CD5710E231E123A4B469963BF863CC"
    proc = repo_key(url=f"file://{key}", dest=str(dest), fingerprints=[pinned])
    assert proc.returncode != 0
    assert (
        f"signing key of repository {REPOSITORY} has fingerprint {fingerprint}, not the pinned {pinned}"
        in (proc.stdout)
    )
    assert dest.read_text() == "the key installed before\n", "a refused key must change nothing"


def test_plain_http_key_url_is_refused(tmp_path):
    proc = repo_key(url="http://127.0.0.1:9/key.asc", dest=str(tmp_path / "k"), fingerprints=["A" * 40])
    assert proc.returncode != 0 and "is plain http://; refused" in proc.stdout
    assert not (tmp_path / "k").exists()


def test_no_pin_is_refused(signing_key, tmp_path):
    key, _ = signing_key
    proc = repo_key(url=f"file://{key}", dest=str(tmp_path / "k"), fingerprints=[])
    assert proc.returncode != 0 and f"no fingerprint is pinned for the key of {REPOSITORY}" in proc.stdout
