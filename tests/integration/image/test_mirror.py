"""`make mirror` / playbooks/mirror_stack.yml and the artifact module, against a loopback "vendor" serving
real Debian packages (the stand-in for NVIDIA/AWS/GitHub download hosts, which this network cannot reach). The
checksums the tests expect are Debian's published ones, not computed by the code under test."""

import hashlib
import json
import shutil
import subprocess

import boto3
import pytest
import yaml

from tests.support import REPO, VENV_BIN, ansible_env, run


@pytest.fixture
def fixture_stack(tmp_path, vendor, debian_debs):
    """A one-OS stack whose two artifacts live on the vendor server: one pinned, one with sha256 null."""
    base, root = vendor
    (deb_a, sha_a), (deb_b, _) = debian_debs
    (root / "pool").mkdir()
    for deb in (deb_a, deb_b):
        shutil.copyfile(deb, root / "pool" / deb.name)
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    stack = {
        "id": "ts-fixture",
        "status": "current",
        "scope": {
            "os": ["debian-12"],
            "lab_os": ["debian-12"],
            "arch": ["x86_64"],
            "instance_families": ["g5"],
        },
        "components": {
            "pinned": {
                "version": "1.0",
                "os": ["debian-12"],
                "arch": ["x86_64"],
                "source": base,
                "artifacts": [
                    # The loopback vendor speaks plain http: the stack must say so per artifact.
                    {"name": "deb-a", "url": f"{base}/pool/{deb_a.name}", "sha256": sha_a, "allow_http": True}
                ],
            },
            "unpinned": {
                "version": "1.0",
                "os": ["debian-12"],
                "arch": ["x86_64"],
                "source": base,
                "artifacts": [
                    {"name": "deb-b", "url": f"{base}/pool/{deb_b.name}", "sha256": None, "allow_http": True}
                ],
            },
        },
    }
    (stacks / "ts-fixture.yml").write_text(yaml.safe_dump(stack))
    return {
        "dir": stacks,
        "root": root,
        "debs": debian_debs,
        "lock": stacks / "locks" / "ts-fixture.lock.json",
    }


def mirror(stacks_dir, dest, check=True):
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "playbooks/mirror_stack.yml",
            "-e",
            "trainstack_stack=ts-fixture",
            "-e",
            f"mirror_stack_dir={stacks_dir}",
            "-e",
            f"mirror_dest={dest}",
        ],
        check=check,
    )


def test_mirror_fetches_and_locks_then_catches_tampering(fixture_stack, tmp_path):
    (_, sha_a), (deb_b, sha_b) = fixture_stack["debs"]
    dest = tmp_path / "mirror"
    mirror(fixture_stack["dir"], dest)
    lock = json.loads(fixture_stack["lock"].read_text())
    assert lock["stack"] == "ts-fixture"
    assert lock["artifacts"]["deb-a"]["sha256"] == sha_a
    assert lock["artifacts"]["deb-b"]["sha256"] == sha_b, (
        "the unpinned artifact is locked with Debian's digest"
    )
    assert hashlib.sha256((dest / "deb-b" / deb_b.name).read_bytes()).hexdigest() == sha_b
    before = fixture_stack["lock"].read_text()
    mirror(fixture_stack["dir"], dest)
    assert fixture_stack["lock"].read_text() == before, "a second mirror run must not rewrite the lock"

    served = fixture_stack["root"] / "pool" / deb_b.name
    served.write_bytes(served.read_bytes() + b"\0tampered")
    tampered = hashlib.sha256(served.read_bytes()).hexdigest()
    (dest / "deb-b" / deb_b.name).unlink()
    proc = mirror(fixture_stack["dir"], dest, check=False)
    assert proc.returncode != 0
    assert f"expected sha256 {sha_b}, got {tampered}" in proc.stdout
    assert "1 of 2 artifacts not mirrored" in proc.stdout


def test_pinned_artifact_mismatch_fails_before_locking(fixture_stack, tmp_path):
    (deb_a, sha_a), _ = fixture_stack["debs"]
    served = fixture_stack["root"] / "pool" / deb_a.name
    served.write_bytes(b"not the package Debian published")
    proc = mirror(fixture_stack["dir"], tmp_path / "mirror", check=False)
    assert proc.returncode != 0
    assert f"expected sha256 {sha_a}, got {hashlib.sha256(served.read_bytes()).hexdigest()}" in proc.stdout
    assert "deb-a" not in json.loads(fixture_stack["lock"].read_text())["artifacts"]


def artifact(*args, env=None):
    return run(
        [str(VENV_BIN / "ansible"), "localhost", "-m", "trainstack.cluster.artifact", "-a", " ".join(args)],
        check=False,
        env=env or ansible_env(),
    )


def test_build_side_uses_mirror_and_lock_and_refuses_unknown(fixture_stack, tmp_path):
    (_, _), (deb_b, sha_b) = fixture_stack["debs"]
    dest = tmp_path / "mirror"
    mirror(fixture_stack["dir"], dest)
    url = f"https://vendor.invalid/pool/{deb_b.name}"  # upstream is never contacted when a mirror is given
    common = [f"name=deb-b url={url}", f"mirror_url=file://{dest}"]
    refused = artifact(*common, f"dest={tmp_path}/out/b.deb")
    assert refused.returncode != 0 and "no known sha256" in refused.stdout and "make mirror" in refused.stdout
    # The lock was recorded for the fixture URL, not this one: a lock entry only vouches for its own URL.
    lock = json.loads(fixture_stack["lock"].read_text())
    lock["artifacts"]["deb-b"]["url"] = url
    relock = tmp_path / "relock.json"
    relock.write_text(json.dumps(lock))
    ok = artifact(*common, f"dest={tmp_path}/out/b.deb", f"lock_file={relock}")
    assert ok.returncode == 0, ok.stdout
    assert "verified: true" in ok.stdout and sha_b in ok.stdout
    no_reason = artifact(*common, f"dest={tmp_path}/out/c.deb", "verify=false")
    assert no_reason.returncode != 0 and "unverified_reason: required" in no_reason.stdout
    unverified = artifact(
        *common, f"dest={tmp_path}/out/c.deb", "verify=false", "unverified_reason='vendor publishes none'"
    )
    assert (
        unverified.returncode == 0
        and "WITHOUT checksum verification" in unverified.stdout + unverified.stderr
        and "vendor publishes none" in unverified.stdout + unverified.stderr
    )


def test_make_mirror_needs_a_destination():
    proc = subprocess.run(
        ["make", "-s", "mirror", "MIRROR_DIR="],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "MIRROR_DIR=<directory or s3://bucket/prefix> is required" in proc.stderr


@pytest.mark.moto
def test_s3_mirror_round_trip(fixture_stack, tmp_path, moto_ec2, aws_env):
    """Mirror into a bucket (moto S3), then fetch from s3:// as an air-gapped build would."""
    (deb_a, sha_a), _ = fixture_stack["debs"]
    boto3.client("s3", endpoint_url=moto_ec2).create_bucket(Bucket="ts-mirror")
    env = ansible_env(TRAINSTACK_S3_ENDPOINT_URL=moto_ec2)
    run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "playbooks/mirror_stack.yml",
            "-e",
            "trainstack_stack=ts-fixture",
            "-e",
            f"mirror_stack_dir={fixture_stack['dir']}",
            "-e",
            "mirror_dest=s3://ts-mirror/ts-fixture",
        ],
        env=env,
    )
    keys = {
        o["Key"]
        for o in boto3.client("s3", endpoint_url=moto_ec2).list_objects_v2(Bucket="ts-mirror")["Contents"]
    }
    assert f"ts-fixture/deb-a/{deb_a.name}" in keys
    got = artifact(
        f"name=deb-a url=https://vendor.invalid/pool/{deb_a.name} sha256={sha_a}",
        "mirror_url=s3://ts-mirror/ts-fixture",
        f"dest={tmp_path}/s3/a.deb",
        env=env,
    )
    assert got.returncode == 0, got.stdout
    assert "s3://ts-mirror/ts-fixture/deb-a/" in got.stdout
