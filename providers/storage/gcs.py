"""`gs://bucket/prefix` stores on Google Cloud Storage. See base.py.

This module owns google-cloud-storage (imported lazily). Versions are generations:
create-only is `if_generation_match=0`, if-match is `if_generation_match=<generation>`.
List reports `crc32c` for every object, so certification against GCS reads no bytes.
`endpoint_url` (or `STORAGE_EMULATOR_HOST`) points the client at an emulator with
anonymous credentials. A server-side copy (rewrite) takes the same destination precondition.
Note: gcp-storage-emulator ignores `ifGenerationMatch`; the contract suite marks those tests
xfail there and runs them on `MemoryStore`.
"""

from __future__ import annotations

import binascii
import contextlib
import io
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from lifeboat_dr.kernel.errors import (
    ChecksumMismatch,
    ConfigError,
    LifeboatError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
)
from lifeboat_dr.providers.storage.base import (
    BucketRpo,
    Capabilities,
    ObjectInfo,
    checked_key,
    join,
    store_deadline,
)
from lifeboat_dr.providers.storage.buffers import BUFFERS, gather_cost

CHUNK = 1 << 20
UPLOAD_CHUNK = 8 << 20  # resumable upload chunk for streamed puts (a multiple of 256 KiB)
READ_TRIES = 5  # reads begun again when the object is replaced before its first byte
_LIST_FIELDS = "items(name,size,updated,generation,crc32c,etag),nextPageToken"  # what ObjectInfo needs


def _storage():
    try:
        from google.cloud import storage
    except ImportError:  # pragma: no cover - installed with lifeboat
        raise ConfigError(
            "gs:// stores need google-cloud-storage: pip install google-cloud-storage"
        ) from None
    return storage


class GcsStore:
    capabilities = Capabilities(
        crc32c_in_list=True, crc32c_in_head=True, conditional_writes=True, server_side_copy=True
    )
    max_attempts = 5
    backoff_base = 0.1
    backoff_cap = 5.0
    list_page_size = 1000

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        deadline_s: float | None = None,
    ):
        if not bucket:
            raise ConfigError("a gs:// store needs a bucket: gs://bucket/prefix")
        self.deadline_s = store_deadline(deadline_s)  # an unanswering endpoint: ProviderUnavailable by then
        # Every google call gets our (connect, read) timeout and no retry of its own: its
        # DEFAULT_RETRY retries a refused connection for 120 s, then raises RetryError.
        per_try = min(60.0, self.deadline_s / 2)
        self._rpc = {"timeout": (min(5.0, per_try), per_try), "retry": None}
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.uri = f"gs://{bucket}/{self.prefix}" if self.prefix else f"gs://{bucket}"
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._client_obj = None

    def _client(self):
        if self._client_obj is None:
            storage = _storage()
            emulator = self.endpoint_url or os.environ.get("STORAGE_EMULATOR_HOST")
            try:
                if emulator:
                    from google.auth.credentials import AnonymousCredentials

                    self._client_obj = storage.Client(
                        project="lifeboat",
                        credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": emulator},
                    )
                else:
                    self._client_obj = storage.Client()
            except Exception as e:  # google.auth.exceptions.DefaultCredentialsError and kin
                raise ConfigError(f"{self.uri}: no usable GCS credentials ({e})") from None
        return self._client_obj

    def _bucket(self):
        return self._client().bucket(self.bucket_name)

    def _key(self, key: str) -> str:
        """The object's name; the one place a key is checked (base.py `checked_key`)."""
        return join(self.prefix, checked_key(key, self.uri))

    def _call(self, op: str, key: str | None, fn, *, retry: bool = True):
        """Run `fn()` with bounded retries; map google errors to Lifeboat's, naming the store."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as aexc

        where = f"{self.uri}/{key}" if key else self.uri
        last = None
        attempts = self.max_attempts if retry else 1
        give_up = time.monotonic() + self.deadline_s
        for attempt in range(attempts):
            with self._lock:
                self.calls[op] += 1
            try:
                return fn()
            except gexc.NotFound as e:
                if "bucket" in str(e).lower() and key is None or "No such bucket" in str(e):
                    raise NotFound(f"{self.uri}: bucket {self.bucket_name!r} does not exist") from None
                raise NotFound(f"{where}: no such object") from None
            except gexc.PreconditionFailed:
                raise PreconditionFailed(f"{where}: conditional write lost") from None
            except (gexc.Forbidden, gexc.Unauthorized, aexc.DefaultCredentialsError, aexc.RefreshError) as e:
                raise ConfigError(
                    f"{self.uri}: access refused ({e}); check the credentials for this store"
                ) from None
            except (gexc.TooManyRequests, gexc.ServerError, gexc.RetryError, ConnectionError) as e:
                last = f"{type(e).__name__}: {e}"
            except Exception as e:
                import requests

                if isinstance(e, requests.exceptions.RequestException):
                    last = f"{type(e).__name__}: {e}"
                else:
                    raise
            delay = min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
            if attempt + 1 >= attempts or time.monotonic() + delay >= give_up:
                raise ProviderUnavailable(
                    f"{where}: {op} failed after {attempt + 1} attempt(s) within {self.deadline_s:g}s ({last})"
                )
            time.sleep(delay)
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _info(self, key: str, blob) -> ObjectInfo:
        # Read the JSON resource directly: the client's `updated` property goes through
        # strptime, which costs more than the listing itself at 1,000 objects a page.
        props = blob._properties
        updated = props.get("updated")
        crc = props.get("crc32c")
        return ObjectInfo(
            key=key,
            size=int(props.get("size") or 0),
            updated=_utc(updated) if updated else blob.updated.astimezone(UTC),
            version=str(props.get("generation")),
            crc32c=int.from_bytes(binascii.a2b_base64(crc), "big") if crc else None,
            etag=props.get("etag"),
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        root = f"{self.prefix}/" if self.prefix else ""

        def page(token: str | None):
            # A fresh iterator per page, from the page token: a page that failed is fetched
            # again, never taken for the end of the listing (a dead iterator reads empty).
            it = self._client().list_blobs(
                self.bucket_name,
                prefix=root + prefix,
                page_size=self.list_page_size,
                fields=_LIST_FIELDS,
                page_token=token,
                **self._rpc,
            )
            first = next(it.pages, None)
            return (list(first) if first is not None else []), it.next_page_token

        token = None
        while True:  # one request per page, retried as such
            blobs, token = self._call("list", None, lambda t=token: page(t))
            for blob in sorted(blobs, key=lambda b: b.name):
                yield self._info(blob.name[len(root) :], blob)
            if not token:
                return

    def head(self, key: str) -> ObjectInfo:
        name = self._key(key)
        blob = self._call("get", key, lambda: self._bucket().get_blob(name, **self._rpc))
        if blob is None:
            raise NotFound(f"{self.uri}/{key}: no such object")
        return self._info(key, blob)

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        # Every chunk comes from the generation HEAD saw. A write since removes that
        # generation (404): before the first byte the read starts again on the new one (the
        # object is there: never NotFound); after it, the bytes would mix two objects.
        for _ in range(READ_TRIES):
            info = self.head(key)
            blob = self._bucket().blob(self._key(key), generation=int(info.version))
            stop_at = info.size if end is None else min(end, info.size)
            pos = start
            while pos < stop_at:
                stop = min(stop_at, pos + CHUNK)
                try:
                    chunk = self._call(
                        "get_media",
                        key,
                        lambda p=pos, s=stop, b=blob: b.download_as_bytes(
                            start=p, end=s - 1, checksum=None, **self._rpc
                        ),
                    )
                except NotFound:
                    if pos == start:
                        break  # overwritten (or deleted) since the HEAD: read it again
                    raise ProviderUnavailable(
                        f"{self.uri}/{key}: overwritten while it was read (generation {info.version} "
                        f"is gone after {pos - start} bytes); read it again"
                    ) from None
                if not chunk:
                    return
                yield chunk
                pos += len(chunk)
            else:
                return
        raise ProviderUnavailable(
            f"{self.uri}/{key}: overwritten {READ_TRIES} times while we began reading it"
        )

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
        cond = _generation_match(if_none_match, if_match)
        blob = self._bucket().blob(self._key(key))
        with BUFFERS.held(_upload_cost(data, size)):
            if (
                size is not None
                and size <= UPLOAD_CHUNK
                and not isinstance(data, bytes | bytearray | memoryview)
            ):
                data = b"".join(data)  # small enough for one simple upload instead of a resumable session
            if isinstance(data, bytes | bytearray | memoryview):
                body = bytes(data)
                self._call(
                    "insert",
                    key,
                    lambda: blob.upload_from_string(body, checksum="crc32c", **cond, **self._rpc),
                )
            else:
                # A resumable upload streams chunk by chunk: bounded memory for any size.
                blob.chunk_size = UPLOAD_CHUNK
                stream = io.BufferedReader(_IterReader(data), buffer_size=CHUNK)
                self._call(
                    "insert",
                    key,
                    lambda: blob.upload_from_file(stream, checksum="crc32c", **cond, **self._rpc),
                    retry=False,  # the stream is consumed: a retry must come from the caller
                )
        # The upload's answer is the object resource: no second request for its metadata.
        info = self._info(key, blob) if blob._properties.get("generation") else self.head(key)
        if crc32c is not None and info.crc32c != crc32c:
            with contextlib.suppress(LifeboatError):
                self._call("delete", key, lambda: blob.delete(if_generation_match=int(info.version)))
            raise ChecksumMismatch(
                f"{self.uri}/{key}: stored CRC32C {info.crc32c or 0:08x}, expected {crc32c:08x}; removed"
            )
        return info

    def bucket_rpo(self) -> BucketRpo:
        """The bucket's replication setting (`Bucket.rpo`: DEFAULT or ASYNC_TURBO on a dual-
        or multi-region bucket, None on a regional one) and the store's clock, both from one
        bucket GET: its Date header, never this host's clock. No Date is `ProviderUnavailable`."""
        from email.utils import parsedate_to_datetime

        from google.api_core import exceptions as gexc

        storage = _storage()

        def get():
            client = self._client()
            url = client._connection.build_api_url(
                f"/b/{self.bucket_name}", {"fields": "rpo,locationType,location"}
            )
            response = client._http.request("GET", url, timeout=self._rpc["timeout"])
            if response.status_code >= 400:
                raise gexc.from_http_response(response)
            return response

        response = self._call("get_bucket", None, get)
        bucket = storage.Bucket(self._client(), name=self.bucket_name)
        bucket._set_properties(response.json())
        try:
            at = parsedate_to_datetime(response.headers["Date"]).astimezone(UTC)
        except (KeyError, TypeError, ValueError):
            raise ProviderUnavailable(
                f"{self.uri}: the bucket's answer has no readable Date header: the store's clock is unknown"
            ) from None
        return BucketRpo(bucket.rpo, bucket.location_type, at)

    def delete(self, key: str) -> None:
        name = self._key(key)
        with contextlib.suppress(NotFound):
            self._call("delete", key, lambda: self._bucket().blob(name).delete(**self._rpc))

    def server_copy(
        self, source, src_key: str, dst_key: str, *, if_none_match: bool = False, if_match: str | None = None
    ) -> ObjectInfo | None:
        dst_name = self._key(dst_key)
        if not isinstance(source, GcsStore) or source.endpoint_url != self.endpoint_url:
            return None
        cond = _generation_match(if_none_match, if_match)
        src_blob = self._client().bucket(source.bucket_name).blob(source._key(src_key))
        dst_blob = self._bucket().blob(dst_name)
        token = None
        while True:  # rewrite may take several calls for large objects across locations
            # every call carries the destination's precondition: the object is written by the last
            token, _, _ = self._call(
                "rewrite",
                dst_key,
                lambda t=token: dst_blob.rewrite(src_blob, token=t, **cond, **self._rpc),
            )
            if token is None:
                return self.head(dst_key)


def _upload_cost(data: bytes | Iterable[bytes], size: int | None) -> int:
    """Bytes a put holds beyond the caller's, reserved from the process's byte budget as S3's
    bodies are (providers/storage/buffers.py): bytes given are the caller's to reserve (the
    copy engine does); a small stream is joined (its chunks and the body) and wrapped in one
    multipart/related request; a resumable session holds a chunk and its request."""
    if isinstance(data, bytes | bytearray | memoryview):
        return 0
    if size is not None and size <= UPLOAD_CHUNK:
        return gather_cost(size) + size
    return 2 * UPLOAD_CHUNK


def _generation_match(if_none_match: bool, if_match: str | None) -> dict:
    """A write's precondition as GCS takes it: generation 0 (none) or the planned one."""
    if if_match is not None:
        return {"if_generation_match": int(if_match)}
    return {"if_generation_match": 0} if if_none_match else {}


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)  # RFC 3339 with Z: already UTC
    return t if t.tzinfo is UTC else t.astimezone(UTC)


class _IterReader(io.RawIOBase):
    """A file-like view of an iterator of byte chunks (for resumable uploads)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._buf = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._pos + offset if whence == 1 else None
        if target != self._pos:  # a stream cannot rewind; only "seek to where we are" is honoured
            raise io.UnsupportedOperation("a streamed upload cannot seek")
        return self._pos

    def readinto(self, b) -> int:
        while not self._buf:
            nxt = next(self._chunks, None)
            if nxt is None:
                return 0
            self._buf = bytes(nxt)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        self._pos += n
        return n
