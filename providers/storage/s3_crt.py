"""Single PutObjects through awscrt's S3 client (C: its own HTTP/1.1 connections, SigV4 and
retries), the option `LIFEBOAT_S3_ENGINE=awscrt` selects (providers/storage/s3.py).

Why: per small object botocore's request pipeline costs ~1.6 ms of client CPU against ~0.3 ms
here and ~0.45 ms for s5cmd (docs/replicate.md). Only single PUTs come here: the body is one
Lifeboat already filled and hashed (its CRC32C goes as `x-amz-checksum-crc32c`, verified by
the server, so the object gets a full-object CRC32C). Multipart stays on botocore: the CRT's
own multipart writes COMPOSITE checksums, unverifiable by metadata.
"""

from __future__ import annotations

import io
import re
import threading
from urllib.parse import quote, urlsplit


class _Body(io.RawIOBase):
    """A filled body (bytes or an mmap) read in place by the CRT, never copied whole."""

    def __init__(self, data):
        self._view, self._pos = memoryview(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), len(self._view) - self._pos)
        b[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def release(self) -> None:
        self._view.release()


class CrtPutter:
    """PutObject of one body at a time per calling thread; the client is shared."""

    def __init__(
        self, endpoint_url: str | None, region: str, credentials, *, max_attempts: int, connect_s: float
    ):
        from awscrt.auth import AwsCredentials, AwsCredentialsProvider
        from awscrt.s3 import S3Client, S3RequestTlsMode, S3RetryConfig, create_default_s3_signing_config

        def current():  # botocore's credentials, refreshed as botocore refreshes them
            c = credentials.get_frozen_credentials()
            return AwsCredentials(c.access_key, c.secret_key, c.token)

        provider = AwsCredentialsProvider.new_delegate(current)
        where = urlsplit(endpoint_url) if endpoint_url else None
        self._tls = where is None or where.scheme == "https"
        self._host = where.netloc if where else f"s3.{region}.amazonaws.com"
        self._client = S3Client(
            region=region,
            tls_mode=S3RequestTlsMode.ENABLED if self._tls else S3RequestTlsMode.DISABLED,
            signing_config=create_default_s3_signing_config(region=region, credential_provider=provider),
            part_size=5 << 20,  # the CRT's smallest: its buffers, never used for these bodies' parts
            multipart_upload_threshold=5 << 30,  # never split: these are single PUTs
            retry_config=S3RetryConfig(
                max_retries=max_attempts - 1, backoff_scale_factor_ms=100, max_backoff_secs=5
            ),
            connect_timeout_ms=int(connect_s * 1000),
        )

    def put(self, bucket: str, key: str, body, size: int, headers: dict[str, str], timeout_s: float):
        """(status, response headers, error body, error) of one PutObject: status None when no
        answer came in `timeout_s`, 0 when none came at all (refused: `error` says why)."""
        from awscrt.http import HttpHeaders, HttpRequest
        from awscrt.s3 import S3RequestType

        answer: dict = {}
        done = threading.Event()

        def on_headers(status_code, headers, **_):
            answer["headers"] = {k.lower(): v for k, v in headers}

        def on_done(error=None, status_code=None, error_headers=None, error_body=None, **_):
            answer["status"] = status_code
            if error is not None:
                answer["error"] = error
                answer["body"] = bytes(error_body or b"")
                answer["headers"] = {k.lower(): v for k, v in error_headers or []}
            done.set()

        stream = _Body(body)
        request = HttpRequest(
            "PUT",
            f"/{bucket}/{quote(key, safe='/~')}",
            HttpHeaders([("Host", self._host), ("Content-Length", str(size)), *headers.items()]),
            stream,
        )
        try:
            r = self._client.make_request(
                type=S3RequestType.PUT_OBJECT, request=request, on_headers=on_headers, on_done=on_done
            )
            if not done.wait(timeout_s):
                r.cancel()
                done.wait(5)
                return None, {}, b"", None
        finally:
            stream.release()  # the body's buffer can be freed (an mmap refuses while viewed)
        error = answer.get("error")
        return answer.get("status") or 0, answer.get("headers", {}), answer.get("body", b""), error


def error_code(body: bytes) -> str:
    """The S3 error code in an error answer's XML body ('' when there is none)."""
    m = re.search(rb"<Code>([^<]+)</Code>", body or b"")
    return m.group(1).decode() if m else ""
