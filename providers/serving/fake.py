"""A scripted model endpoint with the toy server's API, for unit tests. See base.py.

Its state is plain attributes: `down` (no HTTP answer), `digest`, `latency_s`, `status`
(of every answer but the model endpoint's when healthy), and `script`: a list of statuses
answered one by one before falling back to `status`. `requests` records every call.
"""

from __future__ import annotations

from lifeboat_dr.providers.serving.base import Answer


class FakeEndpoint:
    def __init__(
        self, url: str = "http://fake", *, digest: str = "sha256:" + "0" * 64, latency_s: float = 0.01
    ):
        self.url, self.digest, self.latency_s = url, digest, latency_s
        self.down, self.status = False, 200
        self.script: list[int] = []
        self.requests: list[tuple[str, str]] = []

    def get(self, path: str, *, timeout: float) -> Answer:
        self.requests.append(("GET", path))
        return self._answer({"digest": self.digest} if path.endswith("/model") else {"ok": True}, timeout)

    def post(self, path: str, body: dict, *, timeout: float) -> Answer:
        self.requests.append(("POST", path))
        return self._answer({"output": "fake", "digest": self.digest}, timeout)

    def _answer(self, body: dict, timeout: float) -> Answer:
        if self.down:
            return Answer(0, 0.0, None, "ConnectionRefusedError: fake endpoint is down")
        if self.latency_s > timeout:
            return Answer(0, timeout, None, "TimeoutError: timed out")
        status = self.script.pop(0) if self.script else self.status
        return Answer(status, self.latency_s, body if 200 <= status < 300 else {"error": "fake"})
