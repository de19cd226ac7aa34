"""Push images to a real registry through its HTTP API v2, as buildah pushes them, for the tests that read
them back: Debian's docker-registry (the lab's registry program) on a free loopback port, blobs uploaded
monolithically, then an OCI manifest with the trainstack annotations."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import lab_registry
from tests.support import CURRENT_STACK_ID, free_port

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
RECORD_ANNOTATION = "org.trainstack.image.json"


def record(cuda: str | None = None, torch: str = "2.13.0+cpu") -> dict[str, Any]:
    """A stack record as image_manifest writes it (the fields the launch check reads)."""
    components: dict[str, Any] = {"pytorch": {"pinned": "2.13.0", "installed": torch, "matches": True}}
    if cuda:
        components["cuda"] = {"pinned": cuda, "installed": f"{cuda}.51", "matches": True}
    return {
        "stack": CURRENT_STACK_ID,
        "flavour": "pytorch",
        "os": "ubuntu-24.04",
        "arch": "x86_64",
        "components": components,
    }


class Registry:
    """Push helper for a running registry (``http://host:port``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.host = url.removeprefix("http://")

    def _request(self, method: str, url: str, body: bytes = b"", ctype: str = "") -> Any:
        request = urllib.request.Request(url, data=body if method != "POST" else b"", method=method)
        if ctype:
            request.add_header("Content-Type", ctype)
        return urllib.request.urlopen(request, timeout=10)

    def blob(self, name: str, data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with self._request("POST", f"{self.url}/v2/{name}/blobs/uploads/") as reply:
            location = reply.headers["Location"]
        location = location if location.startswith("http") else self.url + location
        sep = "&" if "?" in location else "?"
        with self._request("PUT", f"{location}{sep}digest={digest}", data, "application/octet-stream"):
            pass
        return {"digest": digest, "size": len(data)}

    def manifest(self, name: str, tag: str, body: dict[str, Any]) -> bytes:
        data = json.dumps(body).encode()
        with self._request("PUT", f"{self.url}/v2/{name}/manifests/{tag}", data, body["mediaType"]):
            pass
        return data

    def _config(self, name: str, arch: str, labels: dict[str, str]) -> dict[str, Any]:
        body = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
        return self.blob(
            name, json.dumps({**body, "config": {"Labels": labels}} if labels else body).encode()
        )

    def docker_image(self, name: str, tag: str, labels: dict[str, str]) -> bytes:
        """An image as `buildah push --format v2s2` leaves it: a Docker schema 2 manifest (no annotations);
        what the image says of itself is in its configuration's labels."""
        config = self._config(name, "amd64", labels)
        layer = self.blob(name, f"layer of {name}:{tag}".encode())
        return self.manifest(
            name,
            tag,
            {
                "schemaVersion": 2,
                "mediaType": DOCKER_MANIFEST,
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **layer}],
            },
        )

    def image(self, name: str, tag: str, annotations: dict[str, str], arch: str = "amd64") -> bytes:
        config = self._config(name, arch, {})
        layer = self.blob(name, f"layer of {name}:{tag}".encode())
        return self.manifest(
            name,
            tag,
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
                "annotations": annotations,
            },
        )


@contextlib.contextmanager
def running_registry(directory: Path) -> Iterator[Registry]:
    """A docker-registry serving ``directory`` on a free loopback port, stopped (by its pid) afterwards."""
    if shutil.which(lab_registry.BINARY) is None:
        pytest.skip(f"{lab_registry.BINARY} is missing (make host-deps installs docker-registry)")
    url = lab_registry.start(directory, "127.0.0.1", free_port())
    try:
        yield Registry(url)
    finally:
        lab_registry.stop(directory)
