"""A tiny OCI registry on loopback: HEAD manifests with Docker-Content-Digest, GET manifests
and blobs (`publish`), Bearer tokens or Basic auth, a status of our choosing, a log of requests.

The real registry (test_real_registry.py: Debian's Distribution registry, skopeo pushing) runs
prestage end to end with basic auth. This stub stays for what that one does not do on
loopback: a Bearer token service (nvcr.io, Docker Hub, Artifact Registry answer so), a 503
outage, a damaged layer served under its digest, and counting each request."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest


class StubRegistry:
    def __init__(self):
        self.manifests: dict[tuple[str, str], str] = {}  # (name, tag) -> digest
        self.require_token = False
        self.status_override: int | None = None  # e.g. 503 during a registry outage
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self.documents: dict[tuple[str, str], bytes] = {}  # (name, tag or digest) -> manifest body
        self.blobs: dict[str, bytes] = {}  # digest -> bytes (may be corrupted on purpose)
        self.basic: tuple[str, str] | None = None  # require Basic auth with these credentials
        stub = self

        def refused(handler) -> bool:
            auth = handler.headers.get("Authorization")
            if stub.basic:
                ok = auth == "Basic " + base64.b64encode(":".join(stub.basic).encode()).decode()
                challenge = 'Basic realm="stub"'
            else:
                ok = not stub.require_token or auth == "Bearer good-token"
                challenge = f'Bearer realm="http://127.0.0.1:{stub.port}/token",service="stub"'
            if not ok:
                handler.send_response(401)
                handler.send_header("WWW-Authenticate", challenge)
                handler.end_headers()
            return not ok

        def send(handler, status: int, body: bytes = b"", **headers) -> None:
            handler.send_response(status)
            for k, v in headers.items():
                handler.send_header(k.replace("_", "-"), v)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                stub.requests.append(("HEAD", self.path, self.headers.get("Authorization")))
                if stub.status_override:
                    self.send_response(stub.status_override)
                    self.end_headers()
                    return
                parts = urlparse(self.path).path.split("/manifests/")
                name, ref = parts[0].removeprefix("/v2/"), parts[1] if len(parts) > 1 else ""
                if stub.require_token and self.headers.get("Authorization") != "Bearer good-token":
                    self.send_response(401)
                    realm = f"http://127.0.0.1:{stub.port}/token"
                    self.send_header(
                        "WWW-Authenticate",
                        f'Bearer realm="{realm}",service="stub",scope="repository:{name}:pull"',
                    )
                    self.end_headers()
                    return
                digest = stub.manifests.get((name, ref))
                if digest is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Docker-Content-Digest", digest)
                self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
                self.end_headers()

            def do_GET(self):
                stub.requests.append(("GET", self.path, self.headers.get("Authorization")))
                path = urlparse(self.path).path
                if path.startswith("/v2/"):
                    if refused(self):
                        return
                    if "/blobs/" in path:
                        blob = stub.blobs.get(path.rsplit("/blobs/", 1)[1])
                        return send(self, 404) if blob is None else send(self, 200, blob)
                    name, _, ref = path.removeprefix("/v2/").partition("/manifests/")
                    doc = stub.documents.get((name, ref))
                    if doc is None:
                        return send(self, 404)
                    digest = "sha256:" + hashlib.sha256(doc).hexdigest()
                    return send(self, 200, doc, Docker_Content_Digest=digest)
                query = parse_qs(urlparse(self.path).query)
                body = json.dumps({"token": "good-token", "scope": query.get("scope", [""])[0]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # polled every 50 ms, so shutdown() returns at once (serve_forever's default is 0.5 s)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def publish(self, name: str, tag: str, layers: list[bytes]) -> str:
        """An image index (linux/amd64 + arm64) over a manifest with a config and `layers`;
        returns the index digest, which HEAD and GET then serve for `tag`."""

        def put_blob(data: bytes) -> dict:
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            self.blobs[digest] = data
            return {"digest": digest, "size": len(data)}

        def put_doc(doc: dict) -> str:
            body = json.dumps(doc).encode()
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.documents[(name, digest)] = body
            return digest

        config = put_blob(b'{"architecture": "amd64"}')
        manifest = {"schemaVersion": 2, "config": config, "layers": [put_blob(x) for x in layers]}
        amd64 = put_doc(manifest)
        arm64 = put_doc({"schemaVersion": 2, "config": put_blob(b"arm"), "layers": []})
        index = {
            "schemaVersion": 2,
            "manifests": [
                {"digest": arm64, "platform": {"os": "linux", "architecture": "arm64"}},
                {"digest": amd64, "platform": {"os": "linux", "architecture": "amd64"}},
            ],
        }
        digest = put_doc(index)
        self.documents[(name, tag)] = self.documents[(name, digest)]
        self.manifests[(name, tag)] = digest
        return digest

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_registry():
    with StubRegistry() as reg:
        yield reg
