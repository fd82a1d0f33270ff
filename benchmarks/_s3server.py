"""A moto S3 server in its own process that counts every request it answers, by S3 operation.

The counts are taken at the server, so they cannot lie about what a client did: a HEAD sent
by botocore, by s5cmd or by anything else is a HEAD here. `python -m benchmarks._s3server`
prints its port and serves until stdin closes. Besides moto's own API it answers:

  GET  /_bench/counts            {"ops": {op: n}, "body_bytes": n, "payload_hashes": {...}}
  POST /_bench/reset             counts to zero and every bucket deleted (moto's reset)
  POST /_bench/populate?bucket=B&prefix=P&n=N&size=S
                                 N objects of S bytes written straight into moto's backend
                                 (set-up for listing benchmarks; not counted)

`--indexed-list`: moto's ListObjectsV2 walks, sorts and filters every key of the bucket for
each page (O(n) per page: 100,000 keys would take an hour to list). With this flag a page is
cut from a sorted index of the bucket's key names instead: the same keys, tokens and
truncation, O(page) per page, and such a page is rendered straight to XML (moto's generic
serializer takes ~1 s per 1,000-key page). For listing benchmarks over static data (the
index is rebuilt whenever the bucket's key count changes); both sides of a comparison get
the same server.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from contextlib import contextmanager
from urllib.parse import parse_qs


def operation(method: str, path: str, query: dict, headers) -> str:
    """The S3 operation a request is, from its method, path and query (path-style URLs)."""
    has_key = "/" in path.strip("/")
    copy = "HTTP_X_AMZ_COPY_SOURCE" in headers
    if method == "HEAD":  # Lifeboat's own records (locks, site state) apart from the objects
        if not has_key:
            return "HeadBucket"
        return "HeadObject (_lifeboat/)" if "/_lifeboat/" in path else "HeadObject"
    if method == "GET":
        if not has_key:
            return "ListObjects"
        return "GetObject"
    if method == "PUT":
        if not has_key:
            return "CreateBucket"
        if "partNumber" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        return "CopyObject" if copy else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "delete" in query:
            return "DeleteObjects"
        return "Post"
    if method == "DELETE":
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return "DeleteObject" if has_key else "DeleteBucket"
    return method


class Counting:
    """WSGI middleware in front of moto: counts, resets and populates."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.ops: Counter[str] = Counter()
        self.hashes: Counter[str] = Counter()  # x-amz-content-sha256: signed payload or not
        self.body_bytes = 0

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_bench/"):
            return self._bench(path, parse_qs(environ.get("QUERY_STRING", "")), start_response)
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        op = operation(environ["REQUEST_METHOD"], path, query, environ)
        sha = environ.get("HTTP_X_AMZ_CONTENT_SHA256", "")
        with self.lock:
            self.ops[op] += 1
            self.body_bytes += int(environ.get("CONTENT_LENGTH") or 0)
            if op in ("PutObject", "UploadPart"):
                self.hashes[
                    "unsigned" if sha.startswith(("UNSIGNED", "STREAMING-UNSIGNED")) else "sha256"
                ] += 1
        return self.app(environ, start_response)

    def _bench(self, path, query, start_response):
        if path == "/_bench/counts":
            with self.lock:
                body = {
                    "ops": dict(self.ops),
                    "body_bytes": self.body_bytes,
                    "payload_hashes": dict(self.hashes),
                }
        elif path == "/_bench/reset":
            from moto.moto_api._internal.models import moto_api_backend

            moto_api_backend.reset()  # every backend: all buckets and objects gone
            with self.lock:
                self.ops.clear()
                self.hashes.clear()
                self.body_bytes = 0
            body = {"reset": True}
        elif path == "/_bench/populate":
            body = {"written": _populate(query)}
        else:
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b"{}"]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]


def _populate(query) -> int:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket, prefix = query["bucket"][0], query.get("prefix", [""])[0]
    n, size = int(query["n"][0]), int(query.get("size", ["16"])[0])
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for i in range(n):
        key = f"{prefix}{i:07d}.bin"
        value = hashlib.sha256(key.encode()).digest()[:size].ljust(size, b"\0")
        backend.put_object(bucket, key, value, disable_notification=True)
    return n


def _indexed_list_objects_v2() -> None:
    """Replace moto's O(n)-per-page ListObjectsV2 (no delimiter) by a bisect over a sorted
    index of key names; anything else goes to moto's own code."""
    import bisect

    from moto.s3.models import FakeDeleteMarker, S3Backend

    original = S3Backend.list_objects_v2
    index: dict[str, tuple[int, list[str]]] = {}

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
        if delimiter:
            return original(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)
        count = len(bucket.keys)
        cached = index.get(bucket.name)
        if cached is None or cached[0] != count:
            cached = index[bucket.name] = (count, sorted(bucket.keys.keys()))
        names, prefix = cached[1], prefix or ""
        after = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        pos = bisect.bisect_right(names, after) if after else bisect.bisect_left(names, prefix)
        pos = max(pos, bisect.bisect_left(names, prefix))
        page = []
        while pos < len(names) and names[pos].startswith(prefix) and len(page) <= max_keys:
            key = bucket.keys[names[pos]]
            if not isinstance(key, FakeDeleteMarker):
                page.append(key)
            pos += 1
        truncated = len(page) > max_keys
        page = page[:max_keys]
        token = None
        if truncated:
            token = hashlib.md5(page[-1].name.encode()).hexdigest()
            self._pagination_tokens[token] = page[-1].name
        return page, truncated, token

    S3Backend.list_objects_v2 = list_objects_v2
    _plain_list_response()


def _plain_list_response() -> None:
    """ListObjectsV2 pages (no delimiter, no owner) rendered straight to XML:
    moto's generic serializer re-parses each key's timestamp and walks botocore's shape
    model per field (~1 s per 1,000-key page on two shared cores). Same elements, same
    values; anything else goes to moto's own code."""
    from urllib.parse import quote
    from xml.sax.saxutils import escape

    from moto.s3.responses import S3Response

    original = S3Response.list_objects_v2

    def list_objects_v2(self):
        q = self.querystring
        token = q.get("continuation-token", [None])[0]
        encoding = q.get("encoding-type", [None])[0]
        if (
            any(q.get(k, [None])[0] for k in ("delimiter", "fetch-owner"))
            or token == ""
            or encoding not in (None, "url")
        ):
            return original(self)
        name = quote if encoding else str
        bucket = self.backend.get_bucket(self.bucket_name)
        prefix = q.get("prefix", [""])[0] or ""
        max_keys = int(q.get("max-keys", ["1000"])[0])
        start_after = q.get("start-after", [None])[0]
        keys, truncated, next_token = self.backend.list_objects_v2(
            bucket, prefix, None, token, start_after, max_keys
        )
        rows = []
        for k in keys:
            algo = (
                f"<ChecksumAlgorithm>{k.checksum_algorithm}</ChecksumAlgorithm>"
                if k.checksum_algorithm
                else ""
            )
            rows.append(
                f"<Contents><Key>{escape(name(k.name))}</Key><LastModified>{k.last_modified_ISO8601}</LastModified>"
                f"<ETag>{escape(k.etag)}</ETag><Size>{k.size}</Size>{algo}"
                f"<StorageClass>{k.storage_class}</StorageClass></Contents>"
            )
        tail = "<EncodingType>url</EncodingType>" if encoding else ""
        tail += f"<NextContinuationToken>{next_token}</NextContinuationToken>" if next_token else ""
        if not token and start_after:
            tail += f"<StartAfter>{escape(start_after)}</StartAfter>"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket.name)}</Name><Prefix>{escape(name(prefix))}</Prefix><MaxKeys>{max_keys}</MaxKeys>"
            f"<KeyCount>{len(keys)}</KeyCount><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
            f"{''.join(rows)}{tail}</ListBucketResult>"
        )
        return 200, {"Content-Type": "application/xml"}, body

    S3Response.list_objects_v2 = list_objects_v2


def serve() -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    if "--indexed-list" in sys.argv:
        _indexed_list_objects_v2()
    app = Counting(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


class CountedS3:
    """A handle on the server process: its endpoint, counts and reset."""

    def __init__(self, url: str):
        self.url = url

    def _post(self, path: str) -> dict:
        req = urllib.request.Request(f"{self.url}{path}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def counts(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/_bench/counts", timeout=60) as r:
            return json.loads(r.read())

    def reset(self) -> None:
        """Delete every bucket and zero the counts."""
        self._post("/_bench/reset")

    def populate(self, bucket: str, prefix: str, n: int, size: int = 16) -> None:
        self._post(f"/_bench/populate?bucket={bucket}&prefix={prefix}&n={n}&size={size}")


@contextmanager
def counted_s3(indexed_list: bool = False):
    """Start the server process; yields a CountedS3. Stopped (and waited for) on exit."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._s3server", *(["--indexed-list"] if indexed_list else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        port = int(proc.stdout.readline())
        yield CountedS3(f"http://127.0.0.1:{port}")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    serve()
