"""Fingerprints computed from key packets (openpgp_key.py) match what gpg itself reports, for real keys."""

import subprocess

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact import openpgp_key as pk


def make_key(home, algo):
    """A real key made by gpg (armored and binary exports) and the fingerprint gpg reports for it."""
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    gpg = ["gpg", "--batch", "--quiet", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", f"test {algo}", algo, "sign", "never"], env=env, check=True)
    armored = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    binary = subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout
    colons = subprocess.run(
        [*gpg, "--with-colons", "--fingerprint"], env=env, check=True, capture_output=True, text=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    return armored, binary, fingerprint


@pytest.mark.parametrize("algo", ["rsa2048", "ed25519"])
def test_fingerprint_matches_gpg(tmp_path, algo):
    armored, binary, fingerprint = make_key(tmp_path / "gnupg", algo)
    assert pk.primary_fingerprints(armored) == [fingerprint]
    assert pk.primary_fingerprints(binary) == [fingerprint]


def test_two_keys_in_one_file_are_both_reported(tmp_path):
    first, _, fp1 = make_key(tmp_path / "a", "ed25519")
    second, _, fp2 = make_key(tmp_path / "b", "ed25519")
    assert pk.primary_fingerprints(first + second) == [fp1, fp2]


def test_not_a_key_is_refused():
    with pytest.raises(pk.OpenPGPKeyError, match="no armor header"):
        pk.primary_fingerprints(b"<html>not found</html>")


def test_fingerprint_pins_are_normalised_and_checked():
    spaced = "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC"
    assert pk.normalise_fingerprint(spaced.lower()) == "EB693B3035CD5710E231E123A4B469963BF863CC"
    with pytest.raises(pk.OpenPGPKeyError, match="not an OpenPGP fingerprint"):
        pk.normalise_fingerprint("3BF863CC")
