"""`s3://bucket/prefix` stores on AWS S3, Cloudflare R2 or MinIO (`endpoint_url`). See base.py.

This module owns the S3 client (botocore's, as boto3 builds it): built in `_client()` and
nowhere else, every call goes through `_call()` (bounded retries with backoff on throttling
and 5xx, then `ProviderUnavailable`; S3 error codes mapped to Lifeboat's errors, naming the
store).
botocore's own retries are off so the attempt count is ours and the API-call counters
(`calls`, by operation) are exact. `LIFEBOAT_S3_ENGINE=awscrt` sends single PutObjects through
awscrt's C client instead (s3_crt.py; same checksum, preconditions, errors and deadline).

Checksums: objects are written with full-object CRC32C (`ChecksumType=FULL_OBJECT` for
multipart too), which equals the GCS `crc32c`. Each byte is hashed once, as it is gathered
into the request body: a part's CRC32C goes with the part, and the full-object value is
combined from the parts' (`crc32c_combine`), never hashed again. S3 verifies what we send
and refuses a mismatch (BadDigest -> `ChecksumMismatch`), so the answer to a PutObject or
CompleteMultipartUpload is the object's metadata: no HEAD after a write. List does not
return checksum values, so `list()` reports `crc32c=None` and `head()` asks for it
(`ChecksumMode=ENABLED`). A multipart COMPOSITE checksum, or an object carrying only S3's
default CRC64NVME, is not comparable: `head()` reports `crc32c=None` ("unverifiable by
metadata").

Preconditions: create-only is `If-None-Match: *`, if-match is `If-Match: "<ETag>"`, on
PutObject, on CompleteMultipartUpload (a multipart put or copy: the parts never become the
object when it is lost) and on CopyObject, which S3 checks against the destination (412;
409 ConditionalRequestConflict when another write races it, lost the same way).

Memory: objects up to SINGLE_PUT_LIMIT go in one PutObject; larger ones in parts sized per
object (`part_size`), uploaded concurrently by a small pool; every body in flight is
reserved from the process's byte budget (providers/storage/buffers.py) first, filled in
place in one buffer and read from it by the HTTP client (never joined or copied whole). A
local file (providers/storage/files.py `LocalFile`) goes in larger parts (`file_part_size`),
each a range read from disk as it is sent: a part in flight holds a read chunk, not itself,
so one large file keeps every part worker busy within the same budget.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from lifeboat_dr.kernel.crc32c import crc32c, crc32c_combine, from_b64, to_b64
from lifeboat_dr.kernel.errors import (
    ChecksumMismatch,
    ConfigError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
)
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo, checked_key, join, store_deadline
from lifeboat_dr.providers.storage.buffers import BUFFERS, fill, new_body
from lifeboat_dr.providers.storage.files import LocalFile
from lifeboat_dr.providers.storage.s3_models import lean_loader

CHUNK = 1 << 20
SINGLE_PUT_LIMIT = 16 << 20  # objects up to this size (when known) go in one PutObject
PART_SIZE = 8 << 20  # smallest multipart part; larger objects get larger parts (part_size)
MAX_PARTS = 10_000  # S3's limit per upload
PART_WORKERS = 16  # parts in flight per store, all objects together (bytes: the budget)
FILE_PART_LIMIT = 16 << 20  # largest part sent from a local file (files.py: never in memory)
POOL_CONNECTIONS = 64  # HTTP connections kept alive: copy threads + part workers + HEADs
COPY_PART_SIZE = 1 << 30  # UploadPartCopy part size above COPY_LIMIT
COPY_LIMIT = 5 << 30  # CopyObject's single-request ceiling
ENGINES = ("botocore", "awscrt")  # LIFEBOAT_S3_ENGINE: who sends single PutObjects (s3_crt.py)

_RETRYABLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
    "429",
}
_CHECKSUM_CODES = {"BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "InvalidChecksum"}
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}


# botocore.httpsession imports urllib3's pyOpenSSL shim only to take the stdlib SSLContext it
# saved before any patching, and falls back to that very class when the shim is missing; the
# shim pulls in pyOpenSSL and cryptography (~7 MiB RSS, #31) into every S3 process for it.
_PYOPENSSL_SHIM = "urllib3.contrib.pyopenssl"


def _botocore():
    shim = "botocore.httpsession" not in sys.modules and _PYOPENSSL_SHIM not in sys.modules
    if shim:
        sys.modules[_PYOPENSSL_SHIM] = None  # importing it is an ImportError, while botocore loads
    try:
        import botocore
        import botocore.session
    except ImportError:  # pragma: no cover - installed with lifeboat
        raise ConfigError("s3:// stores need boto3: pip install boto3") from None
    finally:
        if shim and sys.modules.get(_PYOPENSSL_SHIM, 0) is None:
            del sys.modules[_PYOPENSSL_SHIM]
    return botocore


class S3Store:
    capabilities = Capabilities(
        crc32c_in_list=False,
        crc32c_in_head=True,
        conditional_writes=True,
        server_side_copy=True,
        file_parts=True,
    )
    max_attempts = 5  # per API call, including the first
    backoff_base = 0.1  # seconds; doubled per attempt, with jitter
    backoff_cap = 5.0
    list_page_size = 1000  # S3's maximum

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        deadline_s: float | None = None,
    ):
        if not bucket:
            raise ConfigError("an s3:// store needs a bucket: s3://bucket/prefix")
        self.deadline_s = store_deadline(deadline_s)  # an unanswering endpoint: ProviderUnavailable by then
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.calls: Counter[str] = Counter()  # API requests by operation, retries included
        self._lock = threading.Lock()
        self._clients: dict[float, object] = {}  # read timeout -> client
        self._parts_pool: ThreadPoolExecutor | None = None
        self.engine = os.environ.get("LIFEBOAT_S3_ENGINE", "botocore")  # single PUTs: botocore or awscrt
        if self.engine not in ENGINES:
            raise ConfigError(f"LIFEBOAT_S3_ENGINE={self.engine!r}: one of {', '.join(ENGINES)}")
        self._crt = None

    # -- the one place a boto3 client is built and called ---------------------------------

    def _client(self, read_timeout: float | None = None):
        """The client; `read_timeout` (seconds) for the calls that may answer slowly."""
        read_timeout = read_timeout or min(60.0, self.deadline_s / 2)
        with self._lock:
            if read_timeout not in self._clients:
                self._clients[read_timeout] = self._new_client(read_timeout)
            return self._clients[read_timeout]

    def _new_client(self, read_timeout: float):
        botocore = _botocore()
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},  # ours, in _call
            max_pool_connections=POOL_CONNECTIONS,
            # one attempt never outlasts the deadline (botocore's defaults are 60 s each)
            connect_timeout=min(5.0, self.deadline_s / 2),
            read_timeout=read_timeout,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            parameter_validation=False,  # every call's parameters are built here, not by users
        )
        # botocore's own session (boto3's adds its resource layer and s3transfer: start-up
        # time and memory a copy does not use), the same credential and region chain; its
        # models from the process's one lean loader.
        session = botocore.session.Session()
        session.register_component("data_loader", lean_loader())
        # Listing parses a timestamp per object: dateutil (botocore's default) cost as
        # much as the rest of a page together; ISO 8601 goes through fromisoformat.
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
        client = session.create_client("s3", endpoint_url=self.endpoint_url, config=config)
        # botocore asks for `Expect: 100-continue` on every file-like body (ours are filled
        # in place, hashed, sized): one wait per PUT for the server's go-ahead, ~50 ms a
        # 16 MiB object on loopback moto. The server still refuses a bad body by its CRC32C.
        from botocore.handlers import add_expect_header

        client.meta.events.unregister("before-call.s3", add_expect_header)
        return client

    def _key(self, key: str) -> str:
        """The object's S3 key; the one place a key is checked (base.py `checked_key`)."""
        return join(self.prefix, checked_key(key, self.uri))

    def _call(self, op: str, key: str | None = None, *, slow_s: float | None = None, **kwargs):
        """Call an S3 operation with bounded retries; map errors to Lifeboat's. `slow_s`: an
        operation the server may take that long to answer (the deadline grows to match)."""
        _botocore()
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            HTTPClientError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        client = self._client(slow_s)
        method = getattr(client, _snake(op))
        where = f"{self.uri}/{key}" if key else self.uri
        last = None
        deadline_s = max(self.deadline_s, slow_s or 0)
        give_up = time.monotonic() + deadline_s
        body = kwargs.get("Body")
        for attempt in range(self.max_attempts):
            with self._lock:
                self.calls[op] += 1
            if hasattr(body, "seek"):
                body.seek(0)  # a retry sends the whole body again
            try:
                return method(**kwargs)
            except (NoCredentialsError, PartialCredentialsError) as e:
                raise ConfigError(f"{self.uri}: no usable S3 credentials ({e})") from None
            except ClientError as e:
                err = e.response.get("Error", {})
                code = str(err.get("Code", ""))
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code == "InvalidRange":
                    raise _EmptyRange() from None
                refused = self._refused(op, where, code, status, err.get("Message", ""))
                if refused is not None:
                    raise refused from None
                last = f"{code or status}"
            except (ConnectionError, HTTPClientError) as e:  # refused, connect/read timeouts
                last = f"{type(e).__name__}: {e}"
            delay = min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
            if attempt + 1 >= self.max_attempts or time.monotonic() + delay >= give_up:
                raise ProviderUnavailable(
                    f"{where}: {op} failed after {attempt + 1} attempt(s) within {deadline_s:g}s ({last})"
                )
            time.sleep(delay)
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _refused(self, op: str, where: str, code: str, status: int, message: str) -> Exception | None:
        """Lifeboat's error for an S3 error answer; None when another attempt may succeed."""
        if code == "NoSuchBucket":
            return NotFound(f"{self.uri}: bucket {self.bucket!r} does not exist")
        if code in ("NoSuchKey", "NotFound", "404") or status == 404:
            return NotFound(f"{where}: no such object")
        if code in _CHECKSUM_CODES:
            return ChecksumMismatch(f"{where}: the server refused the body's CRC32C ({code})")
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409):
            return PreconditionFailed(f"{where}: conditional write lost ({code})")
        if code in _CREDENTIAL_CODES or status == 403:
            return ConfigError(
                f"{self.uri}: access refused ({code or status}); check the credentials for this store"
            )
        if code in _RETRYABLE_CODES or status == 429 or status >= 500:
            return None
        return ProviderUnavailable(f"{where}: {op} failed: {code} {message}")

    def _crt_putter(self):
        """awscrt's client for single PUTs (providers/storage/s3_crt.py), with botocore's
        credentials and region."""
        with self._lock:
            if self._crt is None:
                try:
                    from lifeboat_dr.providers.storage.s3_crt import CrtPutter
                except ImportError:
                    raise ConfigError("LIFEBOAT_S3_ENGINE=awscrt needs awscrt: pip install awscrt") from None
                session = _botocore().session.Session()
                credentials = session.get_credentials()
                if credentials is None:
                    raise ConfigError(f"{self.uri}: no usable S3 credentials")
                self._crt = CrtPutter(
                    self.endpoint_url,
                    session.get_config_variable("region") or "us-east-1",
                    credentials,
                    max_attempts=self.max_attempts,
                    connect_s=min(5.0, self.deadline_s / 2),
                )
            return self._crt

    def _crt_put(self, key: str, body, size: int, cond: dict, crc: int) -> dict:
        """One PutObject through awscrt; the answer as botocore's would read for `_landed`."""
        where = f"{self.uri}/{key}"
        # as botocore sends them (moto stores the value only beside the algorithm's name)
        headers = {"x-amz-sdk-checksum-algorithm": "CRC32C", "x-amz-checksum-crc32c": to_b64(crc)}
        headers.update(
            {{"IfNoneMatch": "If-None-Match", "IfMatch": "If-Match"}[k]: v for k, v in cond.items()}
        )
        with self._lock:
            self.calls["PutObject"] += 1
        status, answer, error_body, error = self._crt_putter().put(
            self.bucket, self._key(key), body, size, headers, self.deadline_s
        )
        if status is None:
            raise ProviderUnavailable(f"{where}: PutObject: no answer within {self.deadline_s:g}s (awscrt)")
        if error is not None or not 200 <= status < 300:
            from lifeboat_dr.providers.storage.s3_crt import error_code

            code = error_code(error_body)
            refused = self._refused("PutObject", where, code, status, str(error)) if status else None
            if refused is not None:
                raise refused
            raise ProviderUnavailable(
                f"{where}: PutObject failed after up to {self.max_attempts} attempt(s) ({code or status or error})"
            )
        return {
            "ETag": answer.get("etag"),
            "ChecksumCRC32C": answer.get("x-amz-checksum-crc32c"),
            "ChecksumType": answer.get("x-amz-checksum-type", "FULL_OBJECT"),
            "ResponseMetadata": {"HTTPHeaders": answer},
        }

    # -- primitives ----------------------------------------------------------------------

    def _info(
        self, key: str, size: int, modified, etag: str | None, crc: int | None, replication: str | None = None
    ) -> ObjectInfo:
        etag = etag.strip('"') if etag else None
        return ObjectInfo(
            key=key,
            size=int(size),
            updated=modified.astimezone(UTC),
            version=etag or "",
            crc32c=crc,
            etag=etag,
            replication=replication,
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        root = f"{self.prefix}/" if self.prefix else ""
        kwargs = {"Bucket": self.bucket, "Prefix": root + prefix, "MaxKeys": self.list_page_size}
        while True:  # every page; one _call per page so retries are per page
            page = self._call("ListObjectsV2", **kwargs)
            for obj in page.get("Contents", []):
                yield self._info(
                    obj["Key"][len(root) :], obj["Size"], obj["LastModified"], obj.get("ETag"), None
                )
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def head(self, key: str) -> ObjectInfo:
        r = self._call("HeadObject", key, Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED")
        return self._info(
            key, r["ContentLength"], r["LastModified"], r.get("ETag"), _full_crc32c(r), replication_status(r)
        )

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        if end is not None and end <= start:
            return
        kwargs = {"Bucket": self.bucket, "Key": self._key(key)}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            r = self._call("GetObject", key, **kwargs)
        except _EmptyRange:  # reading at or past the end of an object: nothing to stream
            return
        body = r["Body"]
        from botocore.exceptions import BotoCoreError

        try:
            yield from body.iter_chunks(CHUNK)
        except (BotoCoreError, OSError) as e:  # the connection broke mid-object
            raise ProviderUnavailable(f"{self.uri}/{key}: read interrupted ({type(e).__name__}: {e})") from e
        finally:
            body.close()

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
        self._key(key)  # a refused key fails before a byte of `data` is read
        cond = _conditions(if_none_match, if_match)
        if isinstance(data, bytes | bytearray | memoryview):
            return self._put_one(key, data, cond, crc32c)
        if isinstance(data, LocalFile):
            size = data.size
        if size is not None and size <= SINGLE_PUT_LIMIT:
            with BUFFERS.held(size):
                body, crc = fill(data, size, f"{self.uri}/{key}")
                try:
                    _expect(f"{self.uri}/{key}", crc, crc32c)
                    return self._put_one(key, body, cond, crc, size)
                finally:
                    _free(body)
        if isinstance(data, LocalFile):
            return self._put_file(key, data, cond, crc32c)
        return self._put_stream(key, data, cond, crc32c, part_size(size))

    def _put_one(self, key: str, data, cond: dict, crc: int | None, size: int | None = None) -> ObjectInfo:
        """One PutObject of bytes or a filled body (`buffers.fill`) of `size`; `crc` is the
        body's CRC32C when the caller hashed it already."""
        if crc is None:
            crc = crc32c(data)
        n = len(data) if size is None else size
        if self.engine == "awscrt":
            return self._landed(key, n, self._crt_put(key, data, n, cond, crc), crc)
        r = self._call(
            "PutObject",
            key,
            Bucket=self.bucket,
            Key=self._key(key),
            Body=data,
            ChecksumAlgorithm="CRC32C",
            ChecksumCRC32C=to_b64(crc),
            **cond,
        )
        return self._landed(key, n, r, crc)

    def _landed(self, key: str, size: int, response: dict, sent_crc: int | None) -> ObjectInfo:
        """What a write's own answer says about the object (no HEAD): its ETag, the CRC32C the
        server echoes (else the one it verified on receipt), and its time (Last-Modified where
        the answer carries it, else the answer's Date), to the second."""
        crc = sent_crc
        echoed = response.get("ChecksumCRC32C")
        if echoed and "-" not in echoed and response.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT":
            crc = from_b64(echoed)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        stamp = headers.get("last-modified") or headers.get("date")
        when = parsedate_to_datetime(stamp) if stamp else datetime.now(UTC)
        return self._info(key, size, when, response.get("ETag"), crc)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._parts_pool is None:
                self._parts_pool = ThreadPoolExecutor(PART_WORKERS, thread_name_prefix="s3-part")
            return self._parts_pool

    def _put_stream(self, key: str, data: Iterable[bytes], cond: dict, expected: int | None, psize: int):
        """Parts of `psize`, read in order and uploaded concurrently; each part's buffer is
        reserved from the byte budget before it is read and freed when S3 has it. A stream
        that ends within the first part becomes one PutObject."""
        where = f"{self.uri}/{key}"
        parts = _Parts(data, psize, where)
        taken = BUFFERS.acquire(psize)
        try:
            first = parts.next()
        except BaseException:
            BUFFERS.release(taken)
            raise
        if parts.done:
            try:
                _expect(where, first[1], expected)
                return self._put_one(key, first[0], cond, first[1], first[2])
            finally:
                _free(first[0])
                BUFFERS.release(taken)
        try:
            upload_id = self._begin_upload(key)
        except BaseException:
            _free(first[0])
            BUFFERS.release(taken)
            raise
        sent, full, total, part = [], 0, 0, first
        try:
            while part is not None:
                body, crc, n = part
                full, total = crc32c_combine(full, crc, n), total + n
                number = len(sent) + 1
                future = self._pool().submit(self._upload_part, key, upload_id, number, body, crc, taken)
                sent.append((future, taken))
                taken = 0  # the part's worker frees its reservation
                if parts.done:
                    break
                taken = BUFFERS.acquire(psize)
                part = parts.next()
            r = self._complete(key, upload_id, sent, full, total, expected, cond)
        except BaseException:
            self._abandon(key, upload_id, sent, taken)
            raise
        return self._landed(key, total, r, full)

    def _put_file(self, key: str, f: LocalFile, cond: dict, expected: int | None) -> ObjectInfo:
        """A local file (larger than SINGLE_PUT_LIMIT) in parts of `file_part_size`, each a
        range read from disk as it is sent (files.py): a part holds only the HTTP client's
        read blocks, so it reserves one CHUNK of the byte budget, and one large file can
        keep every part worker busy while many files share them. Each part is hashed just
        before it is queued; checksums and preconditions as `_put_stream`."""
        psize = file_part_size(f.size)
        upload_id = self._begin_upload(key)
        sent, full, taken = [], 0, 0
        try:
            for number, start in enumerate(range(0, f.size, psize), 1):
                n = min(psize, f.size - start)
                crc = f.crc32c(start, n)
                full = crc32c_combine(full, crc, n)
                taken = BUFFERS.acquire(CHUNK)
                future = self._pool().submit(
                    self._upload_part, key, upload_id, number, f.range(start, n), crc, taken
                )
                sent.append((future, taken))
                taken = 0  # the part's worker frees its reservation
            r = self._complete(key, upload_id, sent, full, f.size, expected, cond)
        except BaseException:
            self._abandon(key, upload_id, sent, taken)
            raise
        return self._landed(key, f.size, r, full)

    def _begin_upload(self, key: str) -> str:
        """A multipart upload whose whole object is checked by its full CRC32C; its id."""
        up = self._call(
            "CreateMultipartUpload",
            key,
            Bucket=self.bucket,
            Key=self._key(key),
            ChecksumAlgorithm="CRC32C",
            ChecksumType="FULL_OBJECT",
        )
        return up["UploadId"]

    def _complete(
        self, key: str, upload_id: str, sent: list, full: int, total: int, expected: int | None, cond: dict
    ) -> dict:
        """Wait for every part `sent` ((future, reservation) pairs), check the whole object's
        CRC32C against `expected`, and complete the upload under `cond`."""
        listed = [future.result() for future, _ in sent]
        _expect(f"{self.uri}/{key}", full, expected)
        return self._call(
            "CompleteMultipartUpload",
            key,
            slow_s=_assembly_s(total),
            Bucket=self.bucket,
            Key=self._key(key),
            UploadId=upload_id,
            MultipartUpload={"Parts": listed},
            ChecksumType="FULL_OBJECT",
            ChecksumCRC32C=to_b64(full),
            **cond,
        )

    def _abandon(self, key: str, upload_id: str, sent: list, taken: int) -> None:
        """A failed upload: free `taken` and the reservations of parts that never started,
        wait for the others (no part may land after the abort), then abort; the original
        error matters more, and S3 lifecycle rules reap what an abort leaves."""
        BUFFERS.release(taken)
        for future, reserved in sent:
            if future.cancel():  # never started: its worker will not free the reservation
                BUFFERS.release(reserved)
        for future, _ in sent:
            with contextlib.suppress(BaseException):
                future.result()
        with contextlib.suppress(Exception):
            self._call(
                "AbortMultipartUpload", key, Bucket=self.bucket, Key=self._key(key), UploadId=upload_id
            )

    def _upload_part(self, key: str, upload_id: str, number: int, body, crc: int, reserved: int) -> dict:
        try:
            r = self._call(
                "UploadPart",
                key,
                Bucket=self.bucket,
                Key=self._key(key),
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm="CRC32C",
                ChecksumCRC32C=to_b64(crc),
            )
        finally:
            _free(body)
            BUFFERS.release(reserved)
        return {"PartNumber": number, "ETag": r["ETag"], "ChecksumCRC32C": to_b64(crc)}

    def delete(self, key: str) -> None:
        with contextlib.suppress(NotFound):
            self._call("DeleteObject", key, Bucket=self.bucket, Key=self._key(key))

    def server_copy(
        self, source, src_key: str, dst_key: str, *, if_none_match: bool = False, if_match: str | None = None
    ) -> ObjectInfo | None:
        dst = self._key(dst_key)
        if not isinstance(source, S3Store) or source.endpoint_url != self.endpoint_url:
            return None
        cond = _conditions(if_none_match, if_match)
        src = {"Bucket": source.bucket, "Key": source._key(src_key)}
        info = source.head(src_key)
        if info.size <= COPY_LIMIT:
            # A source with a full-object CRC32C keeps it through CopyObject by default (no
            # recompute); only a source without one needs S3 to compute it.
            algo = {} if info.crc32c is not None else {"ChecksumAlgorithm": "CRC32C"}
            r = self._call(
                "CopyObject",
                dst_key,
                Bucket=self.bucket,
                Key=dst,
                CopySource=src,
                **algo,
                **cond,
            )
            result = r.get("CopyObjectResult", {})
            full = result.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" and "-" not in result.get(
                "ChecksumCRC32C", "-"
            )
            if full and result.get("ETag") and result.get("LastModified"):
                # The copy's own answer carries what a HEAD would: save the round trip.
                crc = from_b64(result["ChecksumCRC32C"])
                return self._info(dst_key, info.size, result["LastModified"], result["ETag"], crc)
            return self.head(dst_key)
        return self._copy_multipart(info, src, dst_key, cond)

    def _copy_multipart(self, info: ObjectInfo, src: dict, dst_key: str, cond: dict) -> ObjectInfo:
        """UploadPartCopy in COPY_PART_SIZE parts; the destination precondition rides on
        CompleteMultipartUpload (UploadPartCopy takes none), so parts copied under a lost
        condition never become the object, and the upload is aborted."""
        k = self._key(dst_key)
        # FULL_OBJECT CRC32C needs the full-object value at completion: only known when the
        # source reports one. Otherwise the copy is COMPOSITE (unverifiable by metadata).
        full = info.crc32c is not None
        up = self._call(
            "CreateMultipartUpload",
            dst_key,
            Bucket=self.bucket,
            Key=k,
            ChecksumAlgorithm="CRC32C",
            **({"ChecksumType": "FULL_OBJECT"} if full else {}),
        )
        upload_id, parts = up["UploadId"], []
        try:
            for n, start in enumerate(range(0, info.size, COPY_PART_SIZE), 1):
                end = min(info.size, start + COPY_PART_SIZE) - 1
                r = self._call(
                    "UploadPartCopy",
                    dst_key,
                    Bucket=self.bucket,
                    Key=k,
                    UploadId=upload_id,
                    PartNumber=n,
                    CopySource=src,
                    CopySourceRange=f"bytes={start}-{end}",
                )
                part = {"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]}
                if r["CopyPartResult"].get("ChecksumCRC32C"):
                    part["ChecksumCRC32C"] = r["CopyPartResult"]["ChecksumCRC32C"]
                parts.append(part)
            extra = {"ChecksumType": "FULL_OBJECT", "ChecksumCRC32C": to_b64(info.crc32c)} if full else {}
            r = self._call(
                "CompleteMultipartUpload",
                dst_key,
                Bucket=self.bucket,
                Key=k,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **extra,
                **cond,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self._call("AbortMultipartUpload", dst_key, Bucket=self.bucket, Key=k, UploadId=upload_id)
            raise
        return self._landed(dst_key, info.size, r, info.crc32c)


class _EmptyRange(Exception):
    pass


def _conditions(if_none_match: bool, if_match: str | None) -> dict:
    """A write's destination precondition as PutObject, CopyObject and
    CompleteMultipartUpload all take it: create only, or replace only that ETag."""
    cond = {}
    if if_none_match:
        cond["IfNoneMatch"] = "*"
    if if_match is not None:
        cond["IfMatch"] = f'"{if_match}"'
    return cond


def part_size(size: int | None) -> int:
    """The part size for an object of `size` bytes: PART_SIZE, or the next MiB above
    size / MAX_PARTS so that any object fits S3's part count."""
    if size is None:
        return PART_SIZE  # unknown length: up to 78 GiB at PART_SIZE
    need = -(-size // MAX_PARTS)
    return max(PART_SIZE, -(-need // CHUNK) * CHUNK)


def file_part_size(size: int) -> int:
    """The part size for a local file of `size` bytes: about PART_WORKERS parts (so one file
    alone keeps every worker busy), in whole MiB from `part_size(size)` up to FILE_PART_LIMIT
    (fewer requests for large files; a part from a file is never held in memory)."""
    share = -(-size // PART_WORKERS // CHUNK) * CHUNK
    return max(part_size(size), min(FILE_PART_LIMIT, share))


def _assembly_s(size: int) -> float:
    """How long S3 may take to answer CompleteMultipartUpload for `size` bytes: it assembles
    the object first ("several minutes" for large ones, AWS says); a read timeout shorter
    than that retries an upload the server is still completing, and the retry finds it gone.
    A minute, plus a second per 16 MiB (2 GiB: ~3 min), every wait still bounded."""
    return 60.0 + size / (16 << 20)


class _Parts:
    """A stream of chunks cut into part-sized bodies, each filled in place (`new_body`: no
    join, no second copy) and each byte hashed once on the way."""

    def __init__(self, chunks: Iterable[bytes], size: int, where: str):
        self._chunks, self._size, self._where = iter(chunks), size, where
        self._rest: bytes = b""
        self.done = False

    def _fill(self) -> bool:
        while not self._rest:
            chunk = next(self._chunks, None)
            if chunk is None:
                self.done = True
                return False
            self._rest = chunk
        return True

    def next(self) -> tuple[mmap.mmap | bytes, int, int]:
        """(body, its CRC32C, its length); the body rewound, to be freed with `_free`."""
        body, pos, crc = new_body(self._size), 0, 0
        try:
            while pos < self._size and self._fill():
                take = self._rest[: self._size - pos]  # the whole chunk, unless it crosses the end
                self._rest = self._rest[len(take) :]
                body.write(take)
                crc = crc32c(take, crc)
                pos += len(take)
            if pos == self._size:
                self._fill()  # look ahead, so that the last part is known to be last
            elif pos:
                body.resize(pos)  # the last part (anonymous memory: remapped, not copied)
        except BaseException:
            body.close()
            raise
        if not pos:
            body.close()
            return b"", 0, 0
        body.seek(0)
        return body, crc, pos


def _free(body) -> None:
    """Give a filled body's memory back now (the HTTP client's request objects may keep it
    alive in reference cycles until the collector runs, and the budget counts it free)."""
    if isinstance(body, mmap.mmap):
        body.close()


def _expect(where: str, crc: int, expected: int | None) -> None:
    """Refuse to commit bytes whose CRC32C is not the one they must have."""
    if expected is not None and crc != expected:
        raise ChecksumMismatch(f"{where}: CRC32C of the bytes sent is {crc:08x}, expected {expected:08x}")


def _timestamp(value):
    """A response timestamp: ISO 8601 (listings) by fromisoformat, anything else (HTTP dates,
    epoch seconds) by botocore's own parser."""
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        from botocore.utils import parse_timestamp

        return parse_timestamp(value)


def replication_status(head: dict) -> str | None:
    """The object's Cross-Region Replication status from a HEAD's `x-amz-replication-status`:
    PENDING, COMPLETED or FAILED on a source, REPLICA on a destination (botocore's enum also
    has COMPLETE, an older spelling: read as COMPLETED); None where the bucket replicates
    nothing of it."""
    status = head.get("ReplicationStatus")
    return "COMPLETED" if status == "COMPLETE" else status or None


def _full_crc32c(head: dict) -> int | None:
    """The object's full-object CRC32C from a HEAD, or None when not comparable."""
    value = head.get("ChecksumCRC32C")
    if not value or head.get("ChecksumType") == "COMPOSITE" or "-" in value:
        return None
    return from_b64(value)


def _snake(op: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in op).lstrip("_")
