"""A tiny OCI registry on loopback: HEAD manifests with Docker-Content-Digest, Bearer tokens."""

from __future__ import annotations

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
        stub = self

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
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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
