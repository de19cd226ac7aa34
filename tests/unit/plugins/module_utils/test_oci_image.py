"""Reading an image's stack record from a registry, and the driver rule on it.

The registry is real: Debian's docker-registry (distribution), the lab's registry program, started on a free
loopback port by scripts/lab_registry.py. Images are pushed to it through its HTTP API v2 the
way buildah pushes them (blobs, then an OCI manifest with the trainstack annotations), so what is read back
are the registry's own bytes, digests and 404s. The driver rule is stacks/rules.yml's. docker-registry has no
token service of its own: the token and Basic challenges (Docker Hub, NGC, Amazon ECR) are answered by a small
http.server registry that speaks those exchanges over real HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.image import oci_image as oi

from tests.integration.image.oci_push import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Registry,
    record,
    running_registry,
)
from tests.support import CURRENT_STACK_ID, free_port


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(Path(tmp_path_factory.mktemp("registry"))) as started:
        yield started


def test_the_record_and_digest_come_back_from_the_registry(registry: Registry, current_stack_id: str) -> None:
    body = registry.image(
        "lab/trainstack/pytorch",
        f"{current_stack_id}-abc",
        {oi.RECORD_ANNOTATION: json.dumps(record("13.2"))},
    )
    ref = oi.parse_reference(f"{registry.host}/lab/trainstack/pytorch:{current_stack_id}-abc")
    info = oi.read_image(ref, scheme="http")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert info["digest"] == digest
    assert info["pinned"] == f"{registry.host}/lab/trainstack/pytorch@{digest}"
    assert info["media_type"] == OCI_MANIFEST
    assert info["record"]["components"]["cuda"]["installed"] == "13.2.51"
    assert info["record_from"] == "annotation"
    # The digest reads the same image back.
    again = oi.read_image(oi.parse_reference(info["pinned"]), scheme="http")
    assert again["record"] == info["record"] and again["digest"] == digest


def test_an_image_without_the_record_reads_as_none(registry: Registry) -> None:
    registry.image("other/plain", "1", {"org.opencontainers.image.title": "plain"})
    info = oi.read_image(oi.parse_reference(f"{registry.host}/other/plain:1"), scheme="http")
    assert info["record"] is None and info["annotations"] == {"org.opencontainers.image.title": "plain"}


def test_a_docker_schema2_image_gives_its_record_from_the_configuration_label(registry: Registry) -> None:
    """`buildah push --format v2s2` (what enroot 4.1.2 imports from a distribution registry) keeps no
    annotation; the record is read from the configuration blob the manifest names."""
    body = registry.docker_image(
        "lab/trainstack/pytorch", "v2s2", {oi.RECORD_ANNOTATION: json.dumps(record("13.2")), "x": "y"}
    )
    info = oi.read_image(oi.parse_reference(f"{registry.host}/lab/trainstack/pytorch:v2s2"), scheme="http")
    assert info["media_type"] == DOCKER_MANIFEST and info["annotations"] == {}
    assert info["digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert info["record_from"] == "label"
    assert info["record"]["components"]["cuda"]["installed"] == "13.2.51"
    registry.docker_image("lab/plain", "v2s2", {"x": "y"})
    plain = oi.read_image(oi.parse_reference(f"{registry.host}/lab/plain:v2s2"), scheme="http")
    assert plain["record"] is None and plain["record_from"] is None
    registry.docker_image("lab/broken", "v2s2", {oi.RECORD_ANNOTATION: "{not json"})
    with pytest.raises(oi.ImageError, match=r"label org.trainstack.image.json is not JSON") as caught:
        oi.read_image(oi.parse_reference(f"{registry.host}/lab/broken:v2s2"), scheme="http")
    assert caught.value.kind == "record"


def test_a_missing_tag_is_the_registrys_404(registry: Registry, current_stack_id: str) -> None:
    registry.image("lab/trainstack/base", current_stack_id, {})
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
            f"10.77.0.1:8673/lab/trainstack/pytorch:{CURRENT_STACK_ID}-0123456789ab",
            ("10.77.0.1:8673", "lab/trainstack/pytorch", f"{CURRENT_STACK_ID}-0123456789ab", None),
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


class TokenRegistry(http.server.BaseHTTPRequestHandler):
    """A registry that asks for a token, as Docker Hub and NGC do (Bearer challenge, token endpoint), or for
    Basic credentials, as Amazon ECR does; it serves one real manifest's bytes to an authorized request."""

    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "annotations": {}}).encode()
    seen: ClassVar[list[tuple[str, str]]] = []
    scheme = "Bearer"

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth))
        host = f"127.0.0.1:{self.server.server_address[1]}"
        if self.path.startswith("/token?"):
            return self.reply(200, json.dumps({"token": "t0ken"}).encode(), "application/json")
        if auth in ("Bearer t0ken", "Basic " + base64.b64encode(b"AWS:secret").decode()):
            return self.reply(200, self.body, OCI_MANIFEST)
        challenge = (
            f'Bearer realm="http://{host}/token",service="reg",scope="repository:ns/img:pull"'
            if self.scheme == "Bearer"
            else 'Basic realm="ecr"'
        )
        self.send_response(401)
        self.send_header("WWW-Authenticate", challenge)
        self.end_headers()
        return None

    def reply(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def token_registry() -> Iterator[http.server.ThreadingHTTPServer]:
    TokenRegistry.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_bearer_challenge_is_answered_with_a_token(token_registry: http.server.ThreadingHTTPServer) -> None:
    TokenRegistry.scheme = "Bearer"
    ref = oi.parse_reference(f"127.0.0.1:{token_registry.server_address[1]}/ns/img:1")
    info = oi.read_image(ref, scheme="http")
    assert info["digest"] == "sha256:" + hashlib.sha256(TokenRegistry.body).hexdigest()
    paths = [path for path, _auth in TokenRegistry.seen]
    assert paths == [
        "/v2/ns/img/manifests/1",
        "/token?service=reg&scope=repository%3Ans%2Fimg%3Apull",
        "/v2/ns/img/manifests/1",
    ]
    assert TokenRegistry.seen[1][1] == "" and TokenRegistry.seen[2][1] == "Bearer t0ken"
    assert "t0ken" not in json.dumps(info)  # container_image_info returns this: no registry token in it


def test_basic_credentials_are_sent_only_when_asked(token_registry: http.server.ThreadingHTTPServer) -> None:
    TokenRegistry.scheme = "Basic"
    ref = oi.parse_reference(f"127.0.0.1:{token_registry.server_address[1]}/ns/img:1")
    with pytest.raises(oi.ImageError) as caught:
        oi.read_image(ref, scheme="http")
    assert caught.value.kind == "denied" and "(401)" in str(caught.value)
    info = oi.read_image(ref, scheme="http", username="AWS", password="secret")
    assert info["media_type"] == OCI_MANIFEST
    returned = json.dumps(info)
    assert "secret" not in returned and base64.b64encode(b"AWS:secret").decode() not in returned
