"""A stdlib stand-in for Slack's Web API on loopback: records calls, answers like Slack.

`WebClient(base_url=stub.base_url)` talks to it; `stub.fail_next(method, error, status)`
makes the next call to `method` fail the way Slack does (`{"ok": false, "error": …}`)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


class SlackStub:
    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self._failures: dict[str, list[tuple[str, int]]] = {}
        self._ts = 1000
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                method = self.path.rsplit("/", 1)[-1]
                raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
                if "json" in (self.headers.get("content-type") or ""):
                    args = json.loads(raw or "{}")
                else:
                    args = {k: v[0] for k, v in parse_qs(raw).items()}
                if isinstance(args.get("blocks"), str):
                    args["blocks"] = json.loads(args["blocks"])
                status, body, headers = stub._answer(method, args)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def _answer(self, method: str, args: dict):
        with self._lock:
            self.calls.append((method, args))
            pending = self._failures.get(method) or []
            if pending:
                error, status = pending.pop(0)
                headers = {"retry-after": "0"} if status == 429 else {}
                return status, {"ok": False, "error": error}, headers
            self._ts += 1
            ts = f"{self._ts}.000100"
        if method in ("chat.postMessage", "chat.update"):
            return 200, {"ok": True, "channel": args.get("channel"), "ts": args.get("ts") or ts}, {}
        if method == "chat.postEphemeral":
            return 200, {"ok": True, "message_ts": ts}, {}
        return 200, {"ok": False, "error": "unknown_method"}, {}

    def fail_next(self, method: str, error: str, status: int = 200) -> None:
        with self._lock:
            self._failures.setdefault(method, []).append((error, status))

    def called(self, method: str) -> list[dict]:
        with self._lock:
            return [a for m, a in self.calls if m == method]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
