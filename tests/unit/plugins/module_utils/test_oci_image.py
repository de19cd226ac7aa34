"""Reading an image's stack record from a registry, and the driver rule on it.

The registry is real: Debian's docker-registry (distribution), the lab's registry program, started on a free
loopback port by tests/integration/image/lab_registry.py. Images are pushed to it through its HTTP API v2 the
way buildah pushes them (blobs, then an OCI manifest with the trainstack annotations), so what is read back
are the registry's own bytes, digests and 404s. The driver rule is stacks/rules.yml's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils import oci_image as oi

from tests.integration.image.oci_push import OCI_INDEX, OCI_MANIFEST, Registry, record, running_registry
from tests.support import free_port


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(Path(tmp_path_factory.mktemp("registry"))) as started:
        yield started


def test_the_record_and_digest_come_back_from_the_registry(registry: Registry) -> None:
    body = registry.image(
        "lab/trainstack/pytorch", "ts-2026.12-abc", {oi.RECORD_ANNOTATION: json.dumps(record("13.2"))}
    )
    ref = oi.parse_reference(f"{registry.host}/lab/trainstack/pytorch:ts-2026.12-abc")
    info = oi.read_image(ref, scheme="http")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert info["digest"] == digest
    assert info["pinned"] == f"{registry.host}/lab/trainstack/pytorch@{digest}"
    assert info["media_type"] == OCI_MANIFEST
    assert info["record"]["components"]["cuda"]["installed"] == "13.2.51"
    # The digest reads the same image back.
    again = oi.read_image(oi.parse_reference(info["pinned"]), scheme="http")
    assert again["record"] == info["record"] and again["digest"] == digest


def test_an_image_without_the_record_reads_as_none(registry: Registry) -> None:
    registry.image("other/plain", "1", {"org.opencontainers.image.title": "plain"})
    info = oi.read_image(oi.parse_reference(f"{registry.host}/other/plain:1"), scheme="http")
    assert info["record"] is None and info["annotations"] == {"org.opencontainers.image.title": "plain"}


def test_a_missing_tag_is_the_registrys_404(registry: Registry) -> None:
    registry.image("lab/trainstack/base", "ts-2026.12", {})
    with pytest.raises(oi.ImageError) as caught:
        oi.read_image(oi.parse_reference(f"{registry.host}/lab/trainstack/base:no-such-tag"), scheme="http")
    assert caught.value.kind == "missing"
    assert "has no manifest lab/trainstack/base:no-such-tag (404 from" in str(caught.value)
    with pytest.raises(oi.ImageError) as caught:
        oi.read_image(oi.parse_reference(f"{registry.host}/lab/no-such-repo:1"), scheme="http")
    assert caught.value.kind == "missing"


def test_an_index_is_followed_to_the_hosts_architecture(registry: Registry) -> None:
    arm = registry.image(
        "multi/img", "arm", {oi.RECORD_ANNOTATION: json.dumps({**record(), "arch": "aarch64"})}, "arm64"
    )
    amd = registry.image("multi/img", "amd", {oi.RECORD_ANNOTATION: json.dumps(record("12.8"))})
    entries = [
        {
            "mediaType": OCI_MANIFEST,
            "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "platform": {"os": "linux", "architecture": arch},
        }
        for data, arch in ((arm, "arm64"), (amd, "amd64"))
    ]
    index = registry.manifest(
        "multi/img", "both", {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    )
    ref = oi.parse_reference(f"{registry.host}/multi/img:both")
    info = oi.read_image(ref, scheme="http", arch="x86_64")
    assert info["digest"] == "sha256:" + hashlib.sha256(index).hexdigest()
    assert info["record"]["components"]["cuda"]["pinned"] == "12.8"
    assert oi.read_image(ref, scheme="http", arch="aarch64")["record"]["arch"] == "aarch64"
    with pytest.raises(oi.ImageError, match="has no image for linux/ppc64le"):
        oi.read_image(ref, scheme="http", arch="ppc64le")


def test_a_registry_that_does_not_answer_is_named() -> None:
    ref = oi.parse_reference(f"127.0.0.1:{free_port()}/lab/x:1")
    with pytest.raises(oi.ImageError) as caught:
        oi.read_image(ref, scheme="http")
    assert caught.value.kind == "unreachable" and "registry 127.0.0.1:" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "10.77.0.1:8673/lab/trainstack/pytorch:ts-2026.12-0123456789ab",
            ("10.77.0.1:8673", "lab/trainstack/pytorch", "ts-2026.12-0123456789ab", None),
        ),
        ("nvcr.io#nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3", None)),
        ("ubuntu", (oi.DOCKER_HUB, "library/ubuntu", None, None)),
        ("docker.io/pytorch/pytorch:2.5", (oi.DOCKER_HUB, "pytorch/pytorch", "2.5", None)),
        (
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainstack/base@sha256:" + "a" * 64,
            (
                "123456789012.dkr.ecr.us-east-1.amazonaws.com",
                "ml/trainstack/base",
                None,
                "sha256:" + "a" * 64,
            ),
        ),
    ],
)
def test_references_parse_as_enroot_reads_them(text: str, expected: tuple) -> None:
    ref = oi.parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "an image reference is required"),
        ("img; id", "no spaces, quotes, shell characters or scheme"),
        ("https://r.example/img:1", "no spaces, quotes, shell characters or scheme"),
        ("r.example/img@sha256:abc", "a digest is 'sha256:' and 64 lowercase hex digits"),
        ("r.example:99999/img:1", "registry port '99999' must be 1-65535"),
        ("r_x.example:80/img:1", "registry host 'r_x.example' is not a host name"),
        ("r.example/Upper/img:1", "repository 'Upper/img' must be lowercase path components"),
        ("r.example/img:-bad", "tag '-bad' must be"),
        ("#img", "nothing before '#'"),
    ],
)
def test_bad_references_name_their_rule(text: str, rule: str) -> None:
    with pytest.raises(oi.ImageError) as caught:
        oi.parse_reference(text)
    assert rule in str(caught.value) and caught.value.kind == "syntax"


def test_the_image_cuda_is_read_from_its_record() -> None:
    assert oi.image_cuda(record()) == {}
    assert oi.image_cuda(record("13.2", "2.13.0+cu130")) == {
        "cuda": {"version": "13.2.51"},
        "pytorch": {"version": "2.13.0+cu130", "cuda_runtime": "13.0"},
    }
    assert oi.image_cuda(record(torch="2.9.1+cu128"))["pytorch"]["cuda_runtime"] == "12.8"


def test_a_driver_too_old_for_the_images_cuda_is_named_with_the_rule(rules: list[dict[str, Any]]) -> None:
    image = record("13.2", "2.13.0+cu130")
    problems = oi.driver_problems(image, "570.86.10", rules)
    assert [p["rule"] for p in problems] == ["cuda-driver-minimum", "cuda-driver-minimum"]
    assert (
        problems[0]["message"]
        == "nvidia_driver 570.86.10 is too old for cuda.version 13.2.51: needs >= 580.65.06"
    )
    assert "pytorch.cuda_runtime 13.0" in problems[1]["message"]
    assert problems[0]["citation"].startswith("https://docs.nvidia.com/deploy/cuda-compatibility/")
    assert oi.driver_problems(image, "595.91.07", rules) == []
    assert oi.driver_problems(record("12.8"), "570.86.10", rules) == []
    assert oi.driver_problems(record(), "450.80.02", rules) == []
    with pytest.raises(oi.ImageError, match="is not a version"):
        oi.driver_problems(image, "unknown", rules)


def test_the_host_driver_is_its_records() -> None:
    host = {"components": {"nvidia_driver": {"pinned": "595.91.07", "installed": "595.91.07"}}}
    assert oi.host_driver(host) == "595.91.07"
    assert oi.host_driver({"components": {}}) is None and oi.host_driver(None) is None
