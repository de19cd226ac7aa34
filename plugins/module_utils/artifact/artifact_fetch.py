# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Checksummed downloads for every artifact a stack names (drivers, installers, sources, wheels).

Why one implementation: a build that fetches the EFA installer one way and the NVIDIA driver another ends
up with one path that skips the checksum. Everything goes through `fetch()`: the URL and sha256 come from
the stack, a mirror (HTTP base URL, file:// directory or s3:// bucket) can replace the vendor for air-gapped
builds, and a download whose checksum is unknown is refused unless the stack's lock file holds one (written
by `make mirror`) or the stack marks that one artifact `verify: false` with a reason. Plain http:// is refused
for the same reason a missing checksum is: only the stack entry can allow it (`allow_http: true`). HTTP goes
through Ansible's open_url (proxy, CA bundle and certificate checks as every other module), plus boto3 for s3://
mirrors, so the same code runs inside an Ansible module on a build host and in the controller's mirror run.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ansible.module_utils.urls import open_url

CHUNK = 1024 * 1024
LOCK_FORMAT = 1


class ArtifactError(RuntimeError):
    """A download that must not be used: unreachable, refused for lack of a checksum, or corrupt."""


class PermanentDownloadError(ArtifactError):
    """The server answered that this request cannot succeed (a 4xx status other than timeout and throttling):
    asking again gives the same answer, so it is not retried."""


# 4xx answers that may change on a later try: request timeout, too early, too many requests.
_TRANSIENT_CLIENT_ERRORS = frozenset({408, 425, 429})


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an error carries: urllib's HTTPError (``code``) or botocore's ClientError (S3)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status if isinstance(status, int) else None
    return None


def is_permanent(exc: BaseException) -> bool:
    """Whether an error is a client error that a retry cannot mend."""
    status = _status_of(exc)
    return status is not None and 400 <= status < 500 and status not in _TRANSIENT_CLIENT_ERRORS


class ChecksumMismatchError(ArtifactError):
    """The bytes received are not the bytes the stack or lock pinned; both hashes are in the message."""

    def __init__(self, name: str, source: str, expected: str, actual: str) -> None:
        super().__init__(
            f"checksum mismatch for artifact '{name}' from {source}: expected sha256 {expected}, got {actual}"
        )
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class FetchResult:
    """What happened: `changed` is False when dest already held the verified bytes (idempotent re-runs)."""

    name: str
    dest: str
    source: str
    sha256: str
    size: int
    verified: bool
    changed: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dest": self.dest,
            "source": self.source,
            "sha256": self.sha256,
            "size": self.size,
            "verified": self.verified,
            "changed": self.changed,
        }


def sha256_file(path: str) -> str:
    """Streaming sha256, so multi-GB driver installers never sit in memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_name(url: str) -> str:
    """Last path segment of a URL, unquoted ('torch-2.13.0%2Bcpu-...whl' -> 'torch-2.13.0+cpu-...whl')."""
    name = urllib.parse.unquote(posixpath.basename(urllib.parse.urlparse(url).path))
    if not name:
        raise ArtifactError(f"cannot derive a file name from URL {url!r}")
    return name


def mirror_path(name: str, url: str) -> str:
    """Relative location of an artifact inside a mirror: `<name>/<file>`.

    The artifact name is part of the path because upstream file names collide (GitHub archives are all
    `v<version>.tar.gz`).
    """
    return f"{name}/{file_name(url)}"


def source_for(name: str, url: str, mirror: str | None) -> str:
    """Where to fetch from: the mirror when one is given (air-gapped builds use only it), else upstream."""
    if not mirror:
        return url
    base = mirror.rstrip("/")
    if "://" not in base:
        base = "file://" + os.path.abspath(base)
    return f"{base}/{urllib.parse.quote(mirror_path(name, url))}"


# ---------------------------------------------------------------- lock files


def load_lock(path: str | None) -> dict[str, Any]:
    """A stack's lock file, or an empty one; a corrupt lock is an error, never silently ignored."""
    if not path or not os.path.exists(path):
        return {"format": LOCK_FORMAT, "artifacts": {}}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"lock file {path} is unreadable: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), dict):
        raise ArtifactError(f"lock file {path} has no 'artifacts' mapping")
    return data


def locked_digest(lock: dict[str, Any], name: str, url: str) -> str | None:
    """The recorded sha256 of an artifact, only if recorded for the same URL (a new version re-locks)."""
    entry = lock.get("artifacts", {}).get(name) or {}
    return entry.get("sha256") if entry.get("url") == url else None


def record_lock(path: str, stack_id: str, result: FetchResult, url: str) -> bool:
    """Write one artifact's hash into the lock (atomically); returns whether the file changed."""
    lock = load_lock(path)
    lock["format"] = LOCK_FORMAT
    lock["stack"] = stack_id
    entry = {"url": url, "sha256": result.sha256, "size": result.size}
    if lock["artifacts"].get(result.name, {}).get("sha256") == result.sha256 and (
        lock["artifacts"][result.name].get("url") == url
    ):
        return False
    entry["recorded"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lock["artifacts"][result.name] = entry
    lock["artifacts"] = dict(sorted(lock["artifacts"].items()))
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lock-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(lock, handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, path)
    return True


# ---------------------------------------------------------------- transports


@contextlib.contextmanager
def _open_source(source: str, timeout: float, allow_http: bool = False) -> Iterator[BinaryIO]:
    """A readable stream for http(s)://, file:// or s3:// sources; errors name the source.

    A redirect is followed, but one that lands on plain http:// is refused like an http:// URL would be.
    """
    parsed = urllib.parse.urlparse(source)
    try:
        if parsed.scheme == "s3":
            yield _open_s3(parsed)
        else:
            with contextlib.closing(open_url(source, timeout=timeout, follow_redirects="safe")) as response:
                final = response.geturl() if hasattr(response, "geturl") else source
                if final.startswith("http://") and not source.startswith("http://") and not allow_http:
                    raise ArtifactError(f"cannot download {source}: redirected to plain http ({final})")
                yield response
    except ArtifactError:
        raise
    except Exception as exc:
        error = PermanentDownloadError if is_permanent(exc) else ArtifactError
        raise error(f"cannot download {source}: {exc}") from exc


def check_transport(name: str, url: str, source: str, expected: str | None, allow_http: bool) -> None:
    """Refuse plain http:// unless the stack allows it for this artifact.

    An http:// mirror (the lab's, on its own bridge) is accepted for artifacts whose checksum is known, since
    the bytes are verified after transfer; an unverified artifact over an http:// mirror is refused, because
    then nothing at all vouches for what arrived.
    """
    if url.startswith("http://") and not allow_http:
        raise ArtifactError(
            f"artifact '{name}': {url} is plain http://; refused unless the stack sets allow_http: true on it"
        )
    if source != url and source.startswith("http://") and expected is None and not allow_http:
        raise ArtifactError(
            f"artifact '{name}' has no checksum and the mirror {source} is plain http://: refused "
            "(use an https:// or file:// mirror, or lock its sha256 with `make mirror`)"
        )


def _s3_client() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise ArtifactError("an s3:// mirror needs boto3 on the host that downloads") from exc
    return boto3.client("s3", endpoint_url=os.environ.get("TRAINSTACK_S3_ENDPOINT_URL") or None)


def _open_s3(parsed: urllib.parse.ParseResult) -> BinaryIO:
    key = urllib.parse.unquote(parsed.path.lstrip("/"))
    return _s3_client().get_object(Bucket=parsed.netloc, Key=key)["Body"]


def upload_to_mirror(mirror: str, name: str, url: str, path: str) -> str:
    """Copy a verified file into a mirror (directory or s3:// bucket); returns where it went."""
    rel = mirror_path(name, url)
    if mirror.startswith("s3://"):
        parsed = urllib.parse.urlparse(mirror.rstrip("/"))
        key = posixpath.join(parsed.path.lstrip("/"), rel)
        _s3_client().upload_file(path, parsed.netloc, key)
        return f"s3://{parsed.netloc}/{key}"
    base = mirror[len("file://") :] if mirror.startswith("file://") else mirror
    target = os.path.join(base, rel)
    if os.path.abspath(target) != os.path.abspath(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(path, target)
    return target


# ---------------------------------------------------------------- fetch


@dataclass(frozen=True)
class Trust:
    """What the stack entry says about one artifact: its pinned digest and the two per-artifact exceptions."""

    sha256: str | None = None
    verify: bool = True
    unverified_reason: str | None = None
    allow_http: bool = False


def expected_digest(name: str, url: str, trust: Trust, lock: dict[str, Any] | None) -> str | None:
    """The sha256 the bytes must have, or None where the stack itself marks the artifact unverified.

    Order of trust: the stack's sha256, else the lock's (same URL only). An artifact with neither is refused
    unless its stack entry says `verify: false` and why; no switch waives this for a whole build.
    """
    expected = (trust.sha256 or "").lower() or locked_digest(lock or {}, name, url)
    if expected:
        return expected
    if trust.verify:
        raise ArtifactError(
            f"artifact '{name}' ({url}) has no known sha256 in the stack or its lock file: run "
            "`make mirror` to lock it, or mark that artifact `verify: false` with an `unverified_reason` "
            "in the stack"
        )
    if not (trust.unverified_reason or "").strip():
        raise ArtifactError(f"artifact '{name}': verify: false needs an unverified_reason")
    return None


def fetch(
    name: str,
    url: str,
    dest: str,
    sha256: str | None = None,
    mirror: str | None = None,
    lock: dict[str, Any] | None = None,
    timeout: float = 60.0,
    check_mode: bool = False,
    attempts: int = 3,
    retry_pause: float = 5.0,
    trust: Trust | None = None,
    trust_on_first_use: bool = False,
) -> FetchResult:
    """Download one artifact to `dest`, verified against the stack's or the lock's sha256.

    `trust` carries the stack entry's sha256, `verify`, `unverified_reason` and `allow_http` (`sha256` alone
    is the common case). `trust_on_first_use` is for `make mirror` only: it records the digest of an artifact
    nothing vouches for yet into the lock file, whose diff is then reviewed. A dest that already holds the
    expected bytes is left alone (changed=False).
    """
    trust = trust or Trust(sha256=sha256)
    source = source_for(name, url, mirror)
    if trust_on_first_use:
        expected = (trust.sha256 or "").lower() or locked_digest(lock or {}, name, url)
    else:
        expected = expected_digest(name, url, trust, lock)
    check_transport(name, url, source, expected, trust.allow_http)
    if expected and os.path.isfile(dest) and sha256_file(dest) == expected:
        return FetchResult(name, dest, source, expected, os.path.getsize(dest), True, False)
    if check_mode:
        return FetchResult(name, dest, source, expected or "", 0, expected is not None, True)
    directory = os.path.dirname(os.path.abspath(dest))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".artifact-")
    os.close(fd)
    try:
        actual, size = _download_retrying(source, tmp, timeout, attempts, retry_pause, trust.allow_http)
        if expected and actual != expected:
            raise ChecksumMismatchError(name, source, expected, actual)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return FetchResult(name, dest, source, actual, size, expected is not None, True)


def _download_retrying(
    source: str, path: str, timeout: float, attempts: int, pause: float, allow_http: bool = False
) -> tuple[str, int]:
    """Download with a few tries: vendor CDNs and proxies drop connections now and then, and a build that
    fails on one reset wastes the whole image. Local files (file://) fail the same way every time, and so does
    a 4xx answer such as 404 or 403: one try."""
    tries = 1 if source.startswith("file://") else max(1, attempts)
    for attempt in range(1, tries + 1):
        try:
            return _download(source, path, timeout, allow_http)
        except ArtifactError as exc:
            if attempt == tries or isinstance(exc, PermanentDownloadError):
                error = PermanentDownloadError if isinstance(exc, PermanentDownloadError) else ArtifactError
                raise error(f"{exc} (after {attempt} attempt{'s' if attempt > 1 else ''})") from exc
            time.sleep(pause * attempt)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _download(source: str, path: str, timeout: float, allow_http: bool = False) -> tuple[str, int]:
    """Stream source into path (truncating it), hashing as it goes; returns (sha256, bytes).

    http.client ends a body early without an error when the connection drops (it does not raise
    IncompleteRead from read(n)), which would surface as a checksum mismatch; the length the server announced
    is checked here instead, so a cut transfer is reported as one, and retried.
    """
    digest = hashlib.sha256()
    size = 0
    with open(path, "wb") as out, _open_source(source, timeout, allow_http) as stream:
        announced = _announced_length(stream)
        for chunk in iter(lambda: stream.read(CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        if announced is not None and size != announced:
            raise ArtifactError(f"cannot download {source}: transfer cut short ({size} of {announced} bytes)")
    return digest.hexdigest(), size


def _announced_length(stream: Any) -> int | None:
    """Content-Length of an HTTP(S) or file:// response; None where the source does not say."""
    headers = getattr(stream, "headers", None)
    value = headers.get("Content-Length") if headers is not None else None
    return int(value) if value is not None and str(value).isdigit() else None
