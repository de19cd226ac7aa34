"""Where checkpoints live: a directory all nodes share, or an S3 prefix (``s3://bucket/prefix``).

The URI rules and the client set-up (:func:`parse_s3_uri`, :func:`s3_problem`, :func:`connect_s3`) serve
preparation's S3 input too (:mod:`.prepare`), so a URI means the same to both.

Why one small abstraction: the checkpoint layout (``step-NNNNNNNN/`` with DCP's shards and a completeness
marker written last), resume and retention are the same rules on both; only listing, reading and writing
the marker, deleting a checkpoint and the DCP storage plugin differ. :mod:`.checkpoint` states the rules once
against :class:`CheckpointStore`.

S3 goes through AWS's ``s3torchconnector`` (its DCP ``S3StorageWriter``/``S3StorageReader``, and its client
for the marker, the listing and the deletes), an optional package: nothing here imports it, nor torch, at
module level, so the arguments can be checked (``--validate-only``) without either. The endpoint comes from
the variables every AWS SDK reads (``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``), which the connector
itself does not, so the same run works against AWS and against an S3-compatible server such as moto.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

S3_SCHEME = "s3://"
# Extras to install for s3:// (named in the refusal when the package is missing).
S3_PACKAGES = "s3torchconnector[dcp]==1.5.0 s3torchconnectorclient==1.5.0"
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
# S3's general-purpose bucket naming rules: 3 to 63 lower-case letters, digits, dots and hyphens, starting
# and ending with a letter or digit, no "..", not an IPv4 address.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IPV4 = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def is_s3(location: str) -> bool:
    """An ``s3://`` URI (any case of the scheme: ``S3://`` is the same mistake, refused by name)."""
    return location[: len(S3_SCHEME)].lower() == S3_SCHEME


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix without a trailing slash (empty: the bucket's root)."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{S3_SCHEME}{self.bucket}"

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` under the prefix."""
        return "/".join(filter(None, [self.prefix, *parts]))


def parse_s3_uri(uri: str) -> S3Location:
    """``s3://bucket[/prefix]``, or a ``ValueError`` that says what is wrong with it.

    Why strict: a bucket name S3 would refuse, or an empty path segment (``s3://b//run``, which S3 keeps as
    a distinct key), would otherwise surface as a transfer error after the model is built, or as checkpoints
    that a later resume with the tidier spelling does not find.
    """
    if not uri.startswith(S3_SCHEME):
        raise ValueError(f"{uri!r} is not an S3 URI: it must start with {S3_SCHEME} (lower case)")
    bucket, _slash, prefix = uri[len(S3_SCHEME) :].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket or _IPV4.match(bucket):
        raise ValueError(
            f"{uri!r}: {bucket!r} is not a valid S3 bucket name (3-63 lower-case letters, digits, dots "
            "and hyphens, starting and ending with a letter or digit)"
        )
    prefix = prefix.removesuffix("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"{uri!r}: the key prefix {prefix!r} has an empty, '.' or '..' path segment")
    return S3Location(bucket, prefix)


def s3_problem(uri: str, environ: Mapping[str, str]) -> str | None:
    """Why ``uri`` cannot hold checkpoints here, checked without the network or importing the connector."""
    try:
        parse_s3_uri(uri)
    except ValueError as err:
        return str(err)
    if importlib.util.find_spec("s3torchconnector") is None:
        return f"{uri} needs the s3torchconnector package, which is not installed: pip install {S3_PACKAGES}"
    if not any(environ.get(name) for name in REGION_VARIABLES):
        return f"{uri} needs the bucket's region in AWS_REGION (or AWS_DEFAULT_REGION)"
    return None


class CheckpointStore(Protocol):
    """The few operations the checkpoint rules need, on a directory or on an S3 prefix.

    Entries are named by their last path segment (``step-00000010``); files inside one are named too
    (``train_state.json``). The DCP plugins are built per checkpoint, as DCP takes one location per save.
    """

    @property
    def location(self) -> str:
        """What ``--checkpoint-dir`` named (for messages)."""

    def where(self, name: str) -> str:
        """The full location of entry ``name`` (for messages)."""

    def check(self) -> None:
        """Refuse, naming the location, what cannot hold checkpoints (a bucket that does not exist)."""

    def names(self) -> list[str]:
        """The entries directly under the location (no error when it does not exist yet)."""

    def has(self, name: str, file: str) -> bool: ...

    def read_text(self, name: str, file: str) -> str: ...

    def write_text(self, name: str, file: str, text: str) -> None: ...

    def remove(self, name: str, first: str) -> None:
        """Delete entry ``name``, its file ``first`` before the rest (the marker: never a half-deleted
        checkpoint that still looks complete)."""

    def writer(self, name: str, threads: int = 1, cache_staging: bool = False) -> Any:
        """DCP's ``StorageWriter`` for a checkpoint saved under ``name``, with ``threads`` write streams;
        ``cache_staging``: it keeps its (pinned) staging buffer from one asynchronous save to the next."""

    def reader(self, name: str) -> Any:
        """DCP's ``StorageReader`` for the checkpoint under ``name``."""


@dataclass
class LocalStore:
    """A directory every node sees at the same path (each rank writes its own shards there)."""

    root: Path

    @property
    def location(self) -> str:
        return str(self.root)

    def where(self, name: str) -> str:
        return str(self.root / name)

    def check(self) -> None:
        """Nothing to check ahead: DCP creates the directory at the first save."""

    def names(self) -> list[str]:
        return [child.name for child in self.root.iterdir()] if self.root.is_dir() else []

    def has(self, name: str, file: str) -> bool:
        return (self.root / name / file).is_file()

    def read_text(self, name: str, file: str) -> str:
        return (self.root / name / file).read_text(encoding="utf-8")

    def write_text(self, name: str, file: str, text: str) -> None:
        (self.root / name / file).write_text(text, encoding="utf-8")

    def remove(self, name: str, first: str) -> None:
        (self.root / name / first).unlink(missing_ok=True)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def writer(self, name: str, threads: int = 1, cache_staging: bool = False) -> Any:
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(self.root / name, thread_count=threads, cache_staged_state_dict=cache_staging)

    def reader(self, name: str) -> Any:
        from torch.distributed.checkpoint import FileSystemReader

        return FileSystemReader(self.root / name)


def s3_endpoint(environ: Mapping[str, str]) -> str | None:
    """The endpoint override, as the AWS SDKs read it (the S3-specific variable first)."""
    return next((environ[name] for name in ENDPOINT_VARIABLES if environ.get(name)), None)


def s3_region(environ: Mapping[str, str]) -> str:
    """The region, as the AWS SDKs read it; :func:`s3_problem` refused its absence before."""
    return next(environ[name] for name in REGION_VARIABLES if environ.get(name))


@dataclass(frozen=True)
class S3Connection:
    """s3torchconnector's client, with the region and client configuration it was built with (the DCP
    plugins take them again)."""

    client: Any
    config: Any
    region: str


def connect_s3(environ: Mapping[str, str]) -> S3Connection:
    """A client for the region and endpoint the AWS SDKs would use; :func:`s3_problem` was asked first.

    Path-style addressing (``endpoint/bucket/key``) is used when the endpoint is overridden: an
    S3-compatible server on an address (moto, MinIO) has no per-bucket host names; against AWS's own
    endpoints the connector's default, virtual-hosted style, stays.
    """
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client

    region = s3_region(environ)
    endpoint = s3_endpoint(environ)
    config = S3ClientConfig(force_path_style=endpoint is not None)
    return S3Connection(S3Client(region, endpoint=endpoint, s3client_config=config), config, region)


def s3_objects(client: Any, bucket: str, prefix: str) -> list[Any]:
    """Every object under ``prefix`` (the connector's ``ObjectInfo``: key, size, etag), every page, in
    S3's order; a missing bucket raises the connector's ``S3Exception``."""
    return [info for page in client.list_objects(bucket, prefix) for info in page.object_info]


class S3Store:
    """A key prefix in a bucket, through s3torchconnector's client and its DCP plugins."""

    def __init__(self, uri: str, environ: Mapping[str, str]) -> None:
        self.place = parse_s3_uri(uri)
        self.location = self.place.uri
        # One client for the marker, the listing, the deletes and DCP's streams: the DCP plugins build their
        # own without an endpoint, so they are handed this one (S3FileSystem's s3_client).
        connection = connect_s3(environ)
        self.region, self.config, self.client = connection.region, connection.config, connection.client

    def where(self, name: str) -> str:
        return f"{S3_SCHEME}{self.place.bucket}/{self.place.key(name)}"

    def check(self) -> None:
        """One listing of the prefix: a missing bucket (or no access to it) is refused with its URI."""
        from s3torchconnector import S3Exception

        try:
            next(iter(self.client.list_objects(self.place.bucket, self.place.key(""), max_keys=1)), None)
        except S3Exception as err:
            raise ValueError(f"--checkpoint-dir {self.location}: cannot list the bucket: {err}") from None

    def _list(self, prefix: str, delimiter: str = "") -> tuple[list[str], list[str]]:
        """Keys and common prefixes under ``prefix``, every page."""
        keys: list[str] = []
        prefixes: list[str] = []
        for page in self.client.list_objects(self.place.bucket, prefix, delimiter=delimiter):
            keys += [info.key for info in page.object_info]
            prefixes += list(page.common_prefixes)
        return keys, prefixes

    def names(self) -> list[str]:
        base = self.place.key("") + "/" if self.place.prefix else ""
        _keys, prefixes = self._list(base, "/")
        return [prefix[len(base) :].rstrip("/") for prefix in prefixes]

    def has(self, name: str, file: str) -> bool:
        key = self.place.key(name, file)
        keys, _prefixes = self._list(key)
        return key in keys

    def read_text(self, name: str, file: str) -> str:
        return self.client.get_object(self.place.bucket, self.place.key(name, file)).read().decode("utf-8")

    def write_text(self, name: str, file: str, text: str) -> None:
        with self.client.put_object(self.place.bucket, self.place.key(name, file)) as stream:
            stream.write(text.encode("utf-8"))

    def remove(self, name: str, first: str) -> None:
        """S3 has no directories: every object under the entry's prefix, the marker's first."""
        marker = self.place.key(name, first)
        keys, _prefixes = self._list(self.place.key(name) + "/")
        for key in sorted(keys, key=lambda key: key != marker):
            self.client.delete_object(self.place.bucket, key)

    def writer(self, name: str, threads: int = 1, cache_staging: bool = False) -> Any:
        """s3torchconnector's writer; ``cache_staging`` is refused ahead by the options' rules."""
        del cache_staging
        from s3torchconnector.dcp import S3FileSystem, S3StorageWriter

        writer = S3StorageWriter(
            self.region, self.where(name), s3client_config=self.config, thread_count=threads
        )
        writer.fs = S3FileSystem(self.region, s3_client=self.client)
        return writer

    def reader(self, name: str) -> Any:
        from s3torchconnector import S3ReaderConstructor
        from s3torchconnector.dcp import S3FileSystem, S3StorageReader

        constructor = S3ReaderConstructor.dcp_optimized()
        reader = S3StorageReader(
            self.region, self.where(name), s3client_config=self.config, reader_constructor=constructor
        )
        reader.fs = S3FileSystem(self.region, s3_client=self.client, reader_constructor=constructor)
        return reader


def open_store(location: str | Path, environ: Mapping[str, str]) -> CheckpointStore:
    """The store of ``--checkpoint-dir``: S3 for an ``s3://`` URI, else a directory."""
    text = str(location)
    if is_s3(text):
        return S3Store(text, environ)
    return LocalStore(Path(text))
