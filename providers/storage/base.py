"""The storage interface: a handful of primitives every checkpoint store provides.

Backends (`LocalStore`, `S3Store`, `GcsStore`) implement these and nothing else; copying,
certification and fencing are written once on top of them. Keys are relative to the
store's root prefix and use `/` separators.

Keys: a key names one object under the root and no other (`checked_key`). One with a `..`
or `.` segment, a leading `/`, an empty segment or a NUL is refused by every primitive but
`list` (`RefusedKey`, one line naming it): object stores take such names literally, a
filesystem resolves them into another step's shard or out of the root, so the same
checkpoint would be a different set of files on each. `list` reports keys as the store holds
them, a refused one included, so whoever copies or certifies names it and refuses that one
object, not the listing. Every backend maps a key to its own name in exactly one place and
checks it there; callers never check keys themselves.

Unreachable endpoints: a remote store answers every call within its deadline
(`deadline_s`, default `LIFEBOAT_STORE_DEADLINE` or 30 s), retries included; past it the
call raises `ProviderUnavailable`, never an SDK error, never a wait on the SDK's own retries.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from lifeboat_dr.kernel.errors import ConfigError, RefusedKey


@dataclass(frozen=True, slots=True)  # slots: a listing of 100,000 holds 100,000 of them
class ObjectInfo:
    """What a store knows about one object without reading it."""

    key: str  # relative to the store root
    size: int  # bytes
    updated: datetime  # last write, timezone-aware UTC
    version: str  # opaque token for if-match writes: S3 ETag, GCS generation, local mtime+inode
    crc32c: int | None = None  # full-object CRC32C, when the store reports one by metadata
    etag: str | None = None  # as the store reports it; multipart ETags are not content hashes
    # the bucket's own replication of the object, by HEAD only (S3 `x-amz-replication-status`):
    # PENDING, COMPLETED or FAILED on a source, REPLICA on a destination; None: not reported
    replication: str | None = None


@dataclass(frozen=True)
class BucketRpo:
    """A bucket's own replication across regions, as one answer says it (GCS dual-region)."""

    rpo: str | None  # the bucket's `rpo`: DEFAULT or ASYNC_TURBO; None: the bucket reports none
    location_type: str | None  # region, dual-region, multi-region
    at: datetime  # the store's clock: that answer's Date header


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; checked before an incident, not during one."""

    crc32c_in_list: bool  # list reports CRC32C (GCS) or not (S3: HEAD per object)
    crc32c_in_head: bool  # HEAD reports a comparable full-object CRC32C
    conditional_writes: bool  # create-only and if-match honoured by the server
    server_side_copy: bool  # copy within the store without moving bytes through us
    file_parts: bool = False  # put() sends a LocalFile (files.py) by ranges read from disk as sent


@runtime_checkable
class Store(Protocol):
    """A checkpoint store rooted at a URI such as `s3://bucket/prefix`."""

    uri: str
    capabilities: Capabilities

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix` (all pages), sorted by key."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """Metadata of one object, with CRC32C where the backend can report it.

        Raises `NotFound`."""
        ...

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Stream bytes [start, end) in bounded chunks. Raises `NotFound`."""
        ...

    def put(
        self,
        key: str,
        data: bytes | Iterable[bytes],
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        crc32c: int | None = None,
        size: int | None = None,
    ) -> ObjectInfo:
        """Write an object from bytes or a stream of chunks, storing its CRC32C; returns its
        metadata from the write's own answer (no second request).

        `if_none_match=True` creates only; `if_match=version` replaces only that version.
        A lost condition raises `PreconditionFailed`. `crc32c` is the CRC32C the bytes must
        have (the source's, or the caller's own hash of `data`): it is sent for the server
        to verify, or checked by the store, and bytes that differ are never committed
        (`ChecksumMismatch`). `size`, when known, lets the store pick one request or parts
        of a size fit for the object."""
        ...

    def delete(self, key: str) -> None:
        """Remove an object; removing a missing one is not an error."""
        ...

    def server_copy(
        self,
        source: Store,
        src_key: str,
        dst_key: str,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> ObjectInfo | None:
        """Copy `source`'s object into this store without moving its bytes through us
        (S3 CopyObject/UploadPartCopy, GCS rewrite, local copy and rename), keeping its
        CRC32C. Returns None when `source` is on another service: the caller streams.

        The destination precondition is `put`'s: `if_none_match=True` creates only,
        `if_match=version` replaces only that version; a lost condition raises
        `PreconditionFailed` and leaves the destination as the other writer left it."""
        ...


def checked_key(key: str, where: str) -> str:
    """`key` when it names exactly one object under the root; else `RefusedKey`, naming it
    as `where/key` (`where`: the store's URI)."""
    why = None
    if not key:
        why = "an empty key"
    elif key.startswith("/"):
        why = "a leading '/'"
    elif "\x00" in key:
        why = "a NUL byte"
    else:
        segments = key.split("/")
        if ".." in segments:
            why = "a '..' segment (it would name an object outside its folder)"
        elif "." in segments:
            why = "a '.' segment (another name for its folder)"
        elif "" in segments:
            why = "an empty segment ('//' or a trailing '/')"
    if why:
        raise RefusedKey(f"{where.rstrip('/')}/{key}: refused: {why}")
    return key


def join(prefix: str, key: str) -> str:
    """Join key parts with exactly one `/`."""
    return f"{prefix.rstrip('/')}/{key.lstrip('/')}" if prefix else key.lstrip("/")


DEFAULT_DEADLINE_S = 30.0


def store_deadline(deadline_s: float | None = None) -> float:
    """The deadline a remote store's call honours: `deadline_s`, else `LIFEBOAT_STORE_DEADLINE`
    (seconds), else 30 s. Must be positive."""
    value = deadline_s if deadline_s is not None else os.environ.get("LIFEBOAT_STORE_DEADLINE")
    try:
        seconds = float(value) if value is not None else DEFAULT_DEADLINE_S
    except ValueError:
        raise ConfigError(f"LIFEBOAT_STORE_DEADLINE={value!r} is not a number of seconds") from None
    if seconds <= 0:
        raise ConfigError(f"a store deadline must be positive seconds, not {seconds:g}")
    return seconds


def store_target(store: Store) -> str:
    """The endpoint a store's calls go to, as detection counts unreachable targets: its
    `endpoint_url`'s host:port (MinIO, R2, a site's own S3), else `scheme://bucket` (AWS S3,
    GCS) or the folder of a `file://` store. Every probe reading one store names one target."""
    return uri_target(store.uri, getattr(store, "endpoint_url", None))


def uri_target(uri: str, endpoint_url: str | None = None) -> str:
    """`store_target` of the store at `uri` opened with `endpoint_url`."""
    from urllib.parse import urlparse

    if endpoint_url:
        return (urlparse(endpoint_url).netloc or endpoint_url).lower()
    parsed = urlparse(uri)
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path if parsed.scheme == 'file' else ''}"
