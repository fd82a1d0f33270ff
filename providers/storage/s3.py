"""`s3://bucket/prefix` stores on AWS S3, Cloudflare R2 or MinIO (`endpoint_url`). See base.py.

This module owns boto3: the client is built in `_client()` and nowhere else, every call goes
through `_call()` (bounded retries with backoff on throttling and 5xx, then
`ProviderUnavailable`; S3 error codes mapped to Lifeboat's errors, naming the store).
botocore's own retries are off so the attempt count is ours and the API-call counters
(`calls`, by operation) are exact.

Checksums: objects are written with full-object CRC32C (`ChecksumType=FULL_OBJECT` for
multipart too), which equals the GCS `crc32c`. List does not return checksum values, so
`list()` reports `crc32c=None` and `head()` asks for it (`ChecksumMode=ENABLED`). A
multipart COMPOSITE checksum, or an object carrying only S3's default CRC64NVME, is not
comparable: `head()` reports `crc32c=None` ("unverifiable by metadata").
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC

from lifeboat.crc32c import crc32c, from_b64, to_b64
from lifeboat.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable
from providers.storage.base import Capabilities, ObjectInfo, join, store_deadline

CHUNK = 1 << 20
PART_SIZE = 8 << 20  # multipart part size for streamed puts
COPY_PART_SIZE = 1 << 30  # UploadPartCopy part size above COPY_LIMIT
COPY_LIMIT = 5 << 30  # CopyObject's single-request ceiling

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
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}


def _boto3():
    try:
        import boto3
        import botocore
    except ImportError:  # pragma: no cover - installed with lifeboat
        raise ConfigError("s3:// stores need boto3: pip install 'boto3[crt]'") from None
    return boto3, botocore


class S3Store:
    capabilities = Capabilities(
        crc32c_in_list=False, crc32c_in_head=True, conditional_writes=True, server_side_copy=True
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
        self._client_obj = None

    # -- the one place a boto3 client is built and called ---------------------------------

    def _client(self):
        if self._client_obj is None:
            boto3, botocore = _boto3()
            from botocore.config import Config

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # ours, in _call
                max_pool_connections=32,
                # one attempt never outlasts the deadline (botocore's defaults are 60 s each)
                connect_timeout=min(5.0, self.deadline_s / 2),
                read_timeout=min(60.0, self.deadline_s / 2),
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            self._client_obj = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, config=config
            )
        return self._client_obj

    def _key(self, key: str) -> str:
        return join(self.prefix, key)

    def _call(self, op: str, key: str | None = None, **kwargs):
        """Call an S3 operation with bounded retries; map errors to Lifeboat's."""
        _, botocore = _boto3()
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            HTTPClientError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        client = self._client()
        method = getattr(client, _snake(op))
        where = f"{self.uri}/{key}" if key else self.uri
        last = None
        give_up = time.monotonic() + self.deadline_s
        for attempt in range(self.max_attempts):
            with self._lock:
                self.calls[op] += 1
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
                if code == "NoSuchBucket":
                    raise NotFound(f"{self.uri}: bucket {self.bucket!r} does not exist") from None
                if code in ("NoSuchKey", "NotFound", "404") or status == 404:
                    raise NotFound(f"{where}: no such object") from None
                if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409):
                    raise PreconditionFailed(f"{where}: conditional write lost ({code})") from None
                if code in _CREDENTIAL_CODES or status == 403:
                    raise ConfigError(
                        f"{self.uri}: access refused ({code or status}); check the credentials for this store"
                    ) from None
                if code in _RETRYABLE_CODES or status == 429 or status >= 500:
                    last = f"{code or status}"
                else:
                    raise ProviderUnavailable(f"{where}: {op} failed: {code} {err.get('Message', '')}") from e
            except (ConnectionError, HTTPClientError) as e:  # refused, connect/read timeouts
                last = f"{type(e).__name__}: {e}"
            delay = min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
            if attempt + 1 >= self.max_attempts or time.monotonic() + delay >= give_up:
                raise ProviderUnavailable(
                    f"{where}: {op} failed after {attempt + 1} attempt(s) within {self.deadline_s:g}s ({last})"
                )
            time.sleep(delay)
        raise AssertionError("unreachable")  # the loop always returns or raises

    # -- primitives ----------------------------------------------------------------------

    def _info(self, key: str, size: int, modified, etag: str | None, crc: int | None) -> ObjectInfo:
        etag = etag.strip('"') if etag else None
        return ObjectInfo(
            key=key,
            size=int(size),
            updated=modified.astimezone(UTC),
            version=etag or "",
            crc32c=crc,
            etag=etag,
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
        return self._info(key, r["ContentLength"], r["LastModified"], r.get("ETag"), _full_crc32c(r))

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
        _, botocore = _boto3()
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
    ) -> ObjectInfo:
        cond = {}
        if if_none_match:
            cond["IfNoneMatch"] = "*"
        if if_match is not None:
            cond["IfMatch"] = f'"{if_match}"'
        if isinstance(data, bytes | bytearray | memoryview):
            return self._put_one(key, bytes(data), cond)
        # Stream: buffer one part; small streams become one PutObject, large ones multipart.
        chunks = iter(data)
        buf = bytearray()
        for chunk in chunks:
            buf += chunk
            if len(buf) >= PART_SIZE:
                return self._put_multipart(key, buf, chunks, cond)
        return self._put_one(key, bytes(buf), cond)

    def _put_one(self, key: str, data: bytes, cond: dict) -> ObjectInfo:
        crc = crc32c(data)
        self._call(
            "PutObject",
            key,
            Bucket=self.bucket,
            Key=self._key(key),
            Body=data,
            ChecksumAlgorithm="CRC32C",
            ChecksumCRC32C=to_b64(crc),
            **cond,
        )
        return self.head(key)

    def _put_multipart(self, key: str, buf: bytearray, rest: Iterator[bytes], cond: dict) -> ObjectInfo:
        k = self._key(key)
        up = self._call(
            "CreateMultipartUpload",
            key,
            Bucket=self.bucket,
            Key=k,
            ChecksumAlgorithm="CRC32C",
            ChecksumType="FULL_OBJECT",
        )
        upload_id = up["UploadId"]
        parts, crc = [], 0
        try:

            def send(part: bytes):
                nonlocal crc
                part_crc = crc32c(part)
                crc = crc32c(part, crc)
                r = self._call(
                    "UploadPart",
                    key,
                    Bucket=self.bucket,
                    Key=k,
                    UploadId=upload_id,
                    PartNumber=len(parts) + 1,
                    Body=part,
                    ChecksumAlgorithm="CRC32C",
                    ChecksumCRC32C=to_b64(part_crc),
                )
                parts.append(
                    {"PartNumber": len(parts) + 1, "ETag": r["ETag"], "ChecksumCRC32C": to_b64(part_crc)}
                )

            for chunk in rest:
                buf += chunk
                while len(buf) >= PART_SIZE:
                    send(bytes(buf[:PART_SIZE]))
                    del buf[:PART_SIZE]
            if buf or not parts:
                send(bytes(buf))
            self._call(
                "CompleteMultipartUpload",
                key,
                Bucket=self.bucket,
                Key=k,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                ChecksumType="FULL_OBJECT",
                ChecksumCRC32C=to_b64(crc),
                **cond,
            )
        except BaseException:
            # the original error matters more; S3 lifecycle rules reap what an abort leaves
            with contextlib.suppress(Exception):
                self._call("AbortMultipartUpload", key, Bucket=self.bucket, Key=k, UploadId=upload_id)
            raise
        return self.head(key)

    def delete(self, key: str) -> None:
        with contextlib.suppress(NotFound):
            self._call("DeleteObject", key, Bucket=self.bucket, Key=self._key(key))

    def server_copy(self, source, src_key: str, dst_key: str) -> ObjectInfo | None:
        if not isinstance(source, S3Store) or source.endpoint_url != self.endpoint_url:
            return None
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
                Key=self._key(dst_key),
                CopySource=src,
                **algo,
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
        return self._copy_multipart(source, info, src, dst_key)

    def _copy_multipart(self, source: S3Store, info: ObjectInfo, src: dict, dst_key: str) -> ObjectInfo:
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
            self._call(
                "CompleteMultipartUpload",
                dst_key,
                Bucket=self.bucket,
                Key=k,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **extra,
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self._call("AbortMultipartUpload", dst_key, Bucket=self.bucket, Key=k, UploadId=upload_id)
            raise
        return self.head(dst_key)


class _EmptyRange(Exception):
    pass


def _full_crc32c(head: dict) -> int | None:
    """The object's full-object CRC32C from a HEAD, or None when not comparable."""
    value = head.get("ChecksumCRC32C")
    if not value or head.get("ChecksumType") == "COMPOSITE" or "-" in value:
        return None
    return from_b64(value)


def _snake(op: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in op).lstrip("_")
