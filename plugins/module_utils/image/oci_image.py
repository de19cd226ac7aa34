# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Read a container image's stack record from its registry, and judge it against the host's NVIDIA driver.

Why this exists: a job whose image holds a CUDA newer than the nodes' driver supports starts, allocates its
nodes, imports gigabytes of layers and then dies in its first CUDA call. Every image this collection builds
carries its stack record (``/etc/trainstack/image.json``) as the manifest annotation
``org.trainstack.image.json``, so one manifest request (registry HTTP API v2) answers the question before
anything is submitted. The same record is a label of the image's configuration, which is where it survives a
push as a Docker schema 2 manifest (no annotations there): for such a manifest the configuration blob is read
too. The reference grammar is enroot's (it imports the image on the nodes): a first
component holding a '.' or ':' is a registry, anything else is a Docker Hub name, and ``REGISTRY#IMAGE`` is
accepted too.
The driver rule is the version matrix's own (``stacks/rules.yml``, kind ``driver_for_cuda``), evaluated by
``stack_matrix``; nothing about CUDA or drivers is written here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible.module_utils.urls import open_url
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (
    EVALUATORS,
    StackError,
    Target,
    parse_version,
)

RECORD_ANNOTATION = "org.trainstack.image.json"
DOCKER_HUB = "registry-1.docker.io"
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
INDEX_TYPES = frozenset(MANIFEST_TYPES[2:])
# Image architectures as the OCI platform names them, from the names Linux (and the stack records) use.
OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "arm64": "arm64"}

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_HOST_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# torch's wheel builds name their CUDA runtime in the local version: 2.13.0+cu130 is CUDA 13.0.
_TORCH_CUDA_RE = re.compile(r"\+cu(\d+)(\d)$")


class ImageError(ValueError):
    """An image reference or registry answer that stops the launch; ``kind`` says which rule it broke."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ImageReference:
    """One image: registry host[:port], repository path, tag and/or digest (as enroot resolves them)."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def selector(self) -> str:
        """What the manifest request names: the digest when given (it wins over a tag, as in enroot)."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        """The reference pinned to ``digest`` (registry/repo@digest: Kubernetes and enroot both read it)."""
        registry = "docker.io" if self.registry == DOCKER_HUB else self.registry
        return f"{registry}/{self.repository}@{digest}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "repository": self.repository,
            "tag": self.tag,
            "digest": self.digest,
        }


def _split_registry(text: str) -> tuple[str, str]:
    """(registry, rest): enroot's ``REGISTRY#IMAGE``, a first component with '.' or ':', else Docker Hub."""
    if "#" in text:
        registry, rest = text.split("#", 1)
        if not registry:
            raise ImageError("syntax", f"'{text}': nothing before '#' (enroot's form is REGISTRY#IMAGE)")
        return registry, rest
    first, sep, rest = text.partition("/")
    if sep and ("." in first or ":" in first):
        return first, rest
    return DOCKER_HUB, text


def _check_registry(registry: str, text: str) -> None:
    host, sep, port = registry.partition(":")
    if not _HOST_RE.match(host):
        raise ImageError("syntax", f"'{text}': registry host '{host}' is not a host name or IPv4 address")
    if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ImageError("syntax", f"'{text}': registry port '{port}' must be 1-65535")


def parse_reference(text: str) -> ImageReference:
    """Parse an image reference, naming the rule it breaks (the caller prefixes the variable's name)."""
    if not isinstance(text, str) or not text:
        raise ImageError("syntax", "an image reference is required")
    if re.search(r"\s|['\"\\`$;]", text) or "://" in text:
        raise ImageError(
            "syntax", f"'{text}': an image reference has no spaces, quotes, shell characters or scheme"
        )
    rest, at, digest_text = text.rpartition("@")
    rest, digest = (rest, digest_text) if at else (text, None)
    if digest is not None and not _DIGEST_RE.match(digest):
        raise ImageError("syntax", f"'{text}': a digest is 'sha256:' and 64 lowercase hex digits")
    registry, path = _split_registry(rest)
    _check_registry(registry, text)
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ImageError(
                "syntax", f"'{text}': tag '{tag}' must be [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-]"
            )
    if registry in (DOCKER_HUB, "docker.io"):
        registry = DOCKER_HUB
        path = path if "/" in path else f"library/{path}"
    if not _REPOSITORY_RE.match(path) or len(path) > 255:
        raise ImageError(
            "syntax",
            f"'{text}': repository '{path}' must be lowercase path components ([a-z0-9], separated by"
            " '.', '_', '__' or '-') joined by '/'",
        )
    return ImageReference(registry, path, tag, digest)


@dataclass(frozen=True)
class Answer:
    """A registry's reply: status, headers (lowercase names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


Fetch = Callable[[str, Mapping[str, str]], Answer]


def http_fetch(timeout: float = 20.0) -> Fetch:
    """GET through Ansible's open_url (proxy, CA bundle, certificate checks); HTTP errors are answers too."""

    def fetch(url: str, headers: Mapping[str, str]) -> Answer:
        try:
            response = open_url(url, headers=dict(headers), timeout=timeout, follow_redirects="safe")
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read() or b"")
        with response:
            return Answer(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )

    return fetch


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """The scheme and parameters of a WWW-Authenticate header (``Bearer realm="...",service="..."``)."""
    scheme, _sep, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


def _authorize(fetch: Fetch, answer: Answer, basic: str | None) -> str | None:
    """The Authorization header a 401's challenge asks for: Basic with the given credentials, or a Bearer
    token from the realm (anonymous without credentials, as Docker Hub and many registries allow)."""
    scheme, params = _challenge(answer.headers.get("www-authenticate", ""))
    if scheme == "basic":
        return f"Basic {basic}" if basic else None
    if scheme != "bearer" or "realm" not in params:
        return None
    query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")})
    token_answer = fetch(
        f"{params['realm']}?{query}" if query else params["realm"],
        {"Authorization": f"Basic {basic}"} if basic else {},
    )
    if token_answer.status != 200:
        return None
    token = json.loads(token_answer.body or b"{}")
    value = token.get("token") or token.get("access_token")
    return f"Bearer {value}" if value else None


def _get(fetch: Fetch, url: str, basic: str | None) -> Answer:
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    answer = fetch(url, headers)
    if answer.status == 401:
        authorization = _authorize(fetch, answer, basic)
        if authorization:
            answer = fetch(url, {**headers, "Authorization": authorization})
    return answer


def _manifest(fetch: Fetch, base: str, ref: ImageReference, selector: str, basic: str | None) -> Answer:
    url = f"{base}/v2/{ref.repository}/manifests/{selector}"
    try:
        answer = _get(fetch, url, basic)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ImageError(
            "unreachable", f"registry {ref.registry} cannot be reached ({base}): {reason}"
        ) from exc
    if answer.status == 404:
        raise ImageError(
            "missing",
            f"registry {ref.registry} has no manifest {ref.repository}:{selector} (404 from {url})",
        )
    if answer.status in (401, 403):
        raise ImageError(
            "denied",
            f"registry {ref.registry} refused to show {ref.repository}:{selector} ({answer.status}): give the"
            " registry's credentials, or log in as the nodes do",
        )
    if answer.status != 200:
        raise ImageError("registry", f"registry {ref.registry} answered {answer.status} for {url}")
    return answer


def _config_labels(
    fetch: Fetch, base: str, ref: ImageReference, manifest: Mapping[str, Any], basic: str | None
) -> dict:
    """The labels of the image's configuration blob, checked against the digest the manifest names for it."""
    digest = (manifest.get("config") or {}).get("digest") or ""
    if not _DIGEST_RE.match(digest):
        return {}
    url = f"{base}/v2/{ref.repository}/blobs/{digest}"
    try:
        answer = _get(fetch, url, basic)
    except (urllib.error.URLError, OSError) as exc:
        raise ImageError("unreachable", f"registry {ref.registry} cannot be reached ({base}): {exc}") from exc
    if answer.status != 200:
        raise ImageError("registry", f"registry {ref.registry} answered {answer.status} for {url}")
    if "sha256:" + hashlib.sha256(answer.body).hexdigest() != digest:
        raise ImageError("registry", f"registry {ref.registry}: the configuration blob is not {digest}")
    try:
        config = json.loads(answer.body)
    except ValueError as exc:
        raise ImageError("registry", f"{ref.repository}: the image configuration is not JSON") from exc
    return dict((config.get("config") or {}).get("Labels") or {})


def _platform_manifest(index: Mapping[str, Any], arch: str) -> str | None:
    """The digest of the index entry for linux/<arch> (OCI names: amd64, arm64)."""
    wanted = OCI_ARCH.get(arch, arch)
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os", "linux") == "linux" and platform.get("architecture") == wanted:
            return entry.get("digest")
    return None


def read_image(
    ref: ImageReference,
    scheme: str = "https",
    arch: str = "x86_64",
    username: str | None = None,
    password: str | None = None,
    fetch: Fetch | None = None,
) -> dict[str, Any]:
    """The image's digest, manifest media type, annotations and stack record (None when it carries none), and
    where the record came from (the manifest's annotation, else the configuration's label).

    The digest is the registry's ``Docker-Content-Digest`` (else the sha256 of the manifest's bytes, which is
    what the registry computes): it names the image's content, so it keys the nodes' import cache. An index
    (multi-architecture image) is followed to the manifest of ``arch``; the digest stays the index's, which
    enroot resolves to the same platform."""
    fetch = fetch or http_fetch()
    base = f"{scheme}://{ref.registry}"
    basic = base64.b64encode(f"{username}:{password}".encode()).decode() if username and password else None
    answer = _manifest(fetch, base, ref, ref.selector, basic)
    digest = (
        answer.headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(answer.body).hexdigest()
    )
    try:
        manifest = json.loads(answer.body)
    except ValueError as exc:
        raise ImageError(
            "registry", f"registry {ref.registry}: the manifest of {ref.repository} is not JSON"
        ) from exc
    media_type = manifest.get("mediaType") or answer.headers.get("content-type", "").split(";")[0]
    if media_type in INDEX_TYPES or "manifests" in manifest:
        chosen = _platform_manifest(manifest, arch)
        if chosen is None:
            raise ImageError(
                "missing",
                f"{ref.repository}:{ref.selector} has no image for linux/{OCI_ARCH.get(arch, arch)}",
            )
        manifest = json.loads(_manifest(fetch, base, ref, chosen, basic).body)
    annotations = manifest.get("annotations") or {}
    record, source = annotations.get(RECORD_ANNOTATION), "annotation"
    if not record:
        # A Docker schema 2 manifest has no annotations: the record is the configuration's label.
        record, source = _config_labels(fetch, base, ref, manifest, basic).get(RECORD_ANNOTATION), "label"
    try:
        parsed = json.loads(record) if record else None
    except ValueError as exc:
        raise ImageError("record", f"{ref.repository}: {source} {RECORD_ANNOTATION} is not JSON") from exc
    return {
        "reference": ref.as_dict(),
        "digest": digest,
        "media_type": media_type,
        "annotations": annotations,
        "record": parsed if isinstance(parsed, dict) else None,
        "record_from": source if isinstance(parsed, dict) else None,
        "pinned": ref.pinned(digest),
    }


# ---------------------------------------------------------------- driver against CUDA


def _component_version(record: Mapping[str, Any], name: str) -> str | None:
    """What a stack record says is installed (else pinned) for a component."""
    entry = (record.get("components") or {}).get(name) or {}
    value = entry.get("installed") or entry.get("pinned")
    return str(value) if value else None


def image_cuda(record: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The CUDA an image carries, in the component fields the driver rule reads: the toolkit
    (``cuda.version``) and PyTorch's CUDA runtime (``pytorch.cuda_runtime``, from torch's +cuXYZ build tag,
    which the record's probe keeps). A CPU image gives {}."""
    out: dict[str, dict[str, str]] = {}
    cuda = _component_version(record, "cuda")
    if cuda:
        out["cuda"] = {"version": cuda}
    torch = _component_version(record, "pytorch")
    match = _TORCH_CUDA_RE.search(torch or "")
    if match:
        out["pytorch"] = {"version": str(torch), "cuda_runtime": f"{match.group(1)}.{match.group(2)}"}
    return out


def host_driver(record: Mapping[str, Any] | None) -> str | None:
    """The NVIDIA driver a host's own stack record says it runs (the one its image installed)."""
    return _component_version(record or {}, "nvidia_driver")


def driver_problems(
    image_record: Mapping[str, Any], driver: str, rules: list[Mapping[str, Any]]
) -> list[dict[str, str]]:
    """Every ``driver_for_cuda`` rule of the matrix run on {the host's driver, the image's CUDA}: one entry
    (rule, message, citation) per CUDA field the driver is too old for, or whose major the rule lacks."""
    comps: dict[str, Any] = {"nvidia_driver": {"version": driver}, **image_cuda(image_record)}
    try:
        parse_version(driver)
    except StackError as exc:
        raise ImageError("record", f"the host's driver version '{driver}' is not a version") from exc
    target = Target(str(image_record.get("os", "")), str(image_record.get("arch", "")))
    out = []
    for rule in rules:
        if rule.get("kind") != "driver_for_cuda":
            continue
        for finding in EVALUATORS["driver_for_cuda"](rule, comps, {}, target):
            out.append({"rule": finding.rule, "message": finding.message, "citation": finding.citation})
    return out
