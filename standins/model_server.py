"""A tiny model server (stdlib HTTP) for tests, drills and the demo: the shape of a real one.

    python -m lifeboat_dr.standins.model_server --weights DIR --port 8001 [--name use4]

The "model" is its weight files: the answer to a prompt is a deterministic function of the
prompt and the weights, so two servers with the same weights answer alike.

- `GET /healthz` → 200 `{"ok": true, "name": ...}`
- `GET /v1/model` → `{"digest": "sha256:...", "name": ...}` (see core/serving/digest.py)
- `POST /v1/infer` `{"prompt": "..."}` → `{"output": "...", "digest": ..., "server": ...}`
- `POST /admin/faults` `{"error_rate": 0.5, "delay_ms": 300}`: inject faults (drills, tests)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lifeboat_dr.core.serving.digest import dir_weights_digest


class ToyModel:
    def __init__(self, weights: str | Path, name: str = "toy"):
        self.name, self.digest = name, dir_weights_digest(weights)
        self.error_rate, self.delay_ms = 0.0, 0.0
        self._rng = random.Random(0)

    def infer(self, prompt: str) -> str:
        return hashlib.sha256(f"{self.digest}:{prompt}".encode()).hexdigest()[:16]

    def faulty(self) -> bool:
        if self.delay_ms:
            time.sleep(self.delay_ms / 1000)
        return self._rng.random() < self.error_rate


def _handler(model: ToyModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the load loop sends thousands
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict:
            n = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}") if n <= 1 << 20 else None
            except ValueError:
                body = None
            return body if isinstance(body, dict) else {}

        def do_GET(self):
            if self.path == "/healthz":
                self._send(200, {"ok": True, "name": model.name})
            elif self.path == "/v1/model":
                self._send(200, {"digest": model.digest, "name": model.name})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            body = self._body()
            if self.path == "/admin/faults":
                model.error_rate = float(body.get("error_rate", 0.0))
                model.delay_ms = float(body.get("delay_ms", 0.0))
                self._send(200, {"error_rate": model.error_rate, "delay_ms": model.delay_ms})
            elif self.path == "/v1/infer":
                if not isinstance(body.get("prompt"), str):
                    self._send(400, {"error": "prompt: a string is required"})
                elif model.faulty():
                    self._send(500, {"error": "injected fault"})
                else:
                    out = model.infer(body["prompt"])
                    self._send(200, {"output": out, "digest": model.digest, "server": model.name})
            else:
                self._send(404, {"error": "not found"})

    return Handler


def make_server(weights: str | Path, port: int = 0, name: str = "toy") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(ToyModel(weights, name)))
    server.daemon_threads = True
    return server


@contextmanager
def toy_server(weights: str | Path, name: str = "toy") -> Iterator[str]:
    """Serve the toy model on a free loopback port in a thread; yields its URL."""
    server = make_server(weights, 0, name)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # shutdown() in 50 ms
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m lifeboat_dr.standins.model_server", description=__doc__.splitlines()[0]
    )
    p.add_argument("--weights", required=True, help="directory of weight files")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--name", default="toy")
    a = p.parse_args(argv)
    make_server(a.weights, a.port, a.name).serve_forever()


if __name__ == "__main__":
    main()
