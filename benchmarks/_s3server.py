"""A moto S3 server in its own process that counts every request it answers, by S3 operation.

The counts are taken at the server, so they cannot lie about what a client did: a HEAD sent
by botocore, by s5cmd or by anything else is a HEAD here. `python -m benchmarks._s3server`
prints its port and serves until stdin closes. Besides moto's own API it answers:

  GET  /_bench/counts            {"ops": {op: n}, "body_bytes": n, "payload_hashes": {...}}
  POST /_bench/reset             counts to zero and every bucket deleted (moto's reset)
  POST /_bench/populate?bucket=B&prefix=P&n=N&size=S
                                 N objects of S bytes written straight into moto's backend
                                 (set-up for listing benchmarks; not counted)
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
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
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


def serve() -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

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
def counted_s3():
    """Start the server process; yields a CountedS3. Stopped (and waited for) on exit."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._s3server"],
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
