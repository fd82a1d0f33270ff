"""A model endpoint over plain HTTP (stdlib urllib). See base.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from lifeboat_dr.providers.serving.base import Answer

MAX_BODY = 1 << 20  # a health or canary answer is small; a huge one is refused, not buffered


class HttpEndpoint:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def get(self, path: str, *, timeout: float) -> Answer:
        return self._request(urllib.request.Request(self.url + path, method="GET"), timeout)

    def post(self, path: str, body: dict, *, timeout: float) -> Answer:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        return self._request(req, timeout)

    def _request(self, req: urllib.request.Request, timeout: float) -> Answer:
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read(MAX_BODY + 1)
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read(MAX_BODY + 1)
        except (OSError, ValueError) as e:  # refused, reset, timeout, bad URL
            return Answer(0, time.monotonic() - start, None, f"{type(e).__name__}: {e}".splitlines()[0])
        latency = time.monotonic() - start
        if len(raw) > MAX_BODY:
            return Answer(status, latency, None, f"answer over {MAX_BODY} bytes")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return Answer(status, latency, body)
