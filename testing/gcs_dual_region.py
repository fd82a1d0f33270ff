"""GCS dual-region buckets where the test peers have none: a memory bucket with an rpo, and
a loopback proxy that adds the setting to a real GCS peer's bucket resource.

Neither GCS peer reports the setting: fake-gcs-server answers a bucket GET with
`locationType: region` and no `rpo`, gcp-storage-emulator with `multi-region` and no `rpo`
(tests/certify/test_gcs_dual_region.py holds that gap open). GCS itself reports `rpo`
DEFAULT or ASYNC_TURBO on a dual-region bucket and nothing per object: an object is
replicated within the bound its setting names.

- `DualRegionBucket`: a `MemoryStore` whose `bucket_rpo()` says `rpo` at its own clock (the
  store's, which the test moves), or does not answer (`rpo_answers = False`).
- `RpoProxy`: forwards every request to fake-gcs-server and adds `rpo` and `locationType` to
  the bucket's resource; `ahead` moves the Date of that answer (the store's clock: time
  passing at the store, whose objects keep the `updated` it gave them), `refuse` answers
  it 503. The real `GcsStore` then reads both over HTTP.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from datetime import timedelta
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.base import BucketRpo
from lifeboat_dr.testing.memory_store import MemoryStore

TURBO, DEFAULT = "ASYNC_TURBO", "DEFAULT"


class DualRegionBucket(MemoryStore):
    """A memory bucket that reports a dual-region rpo setting, by its own clock."""

    def __init__(self, name: str = "dual", *, clock, rpo: str | None = TURBO):
        super().__init__(name, clock=clock)
        self.uri = f"gs://{name}/ckpt"
        self.rpo, self.location_type, self.rpo_answers = rpo, "dual-region", True
        self.rpo_reads = 0

    def bucket_rpo(self) -> BucketRpo:
        self.rpo_reads += 1
        if not self.rpo_answers or self.outage:
            raise ProviderUnavailable(f"{self.uri}: get_bucket failed after 5 attempt(s) (503)")
        return BucketRpo(self.rpo, self.location_type, self._clock())


_BUCKET = re.compile(r"^/storage/v1/b/([^/?]+)(\?.*)?$")  # the bucket resource, not its objects


class RpoProxy:
    """A loopback proxy in front of a GCS peer whose bucket resource gains `rpo`."""

    def __init__(self, upstream: str, *, rpo: str | None = TURBO, location_type: str = "dual-region"):
        self.upstream = upstream.removeprefix("http://")
        self.rpo, self.location_type = rpo, location_type
        self.ahead = timedelta(0)  # added to the Date of the bucket's answer
        self.refuse = False  # answer the bucket GET 503
        self.bucket_gets = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                is_bucket = self.command == "GET" and _BUCKET.match(self.path) is not None
                if is_bucket:
                    proxy.bucket_gets += 1
                    if proxy.refuse:
                        return self._send(
                            503, {"Content-Type": "application/json"}, b'{"error": {"code": 503}}'
                        )
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                # the resource whole: the proxy adds the fields the client asked for
                path = self.path.split("?", 1)[0] if is_bucket else self.path
                conn.request(self.command, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                out = {k: v for k, v in resp.getheaders()}
                if is_bucket and resp.status == 200:
                    doc = json.loads(data)
                    doc["locationType"] = proxy.location_type
                    if proxy.rpo is not None:
                        doc["rpo"] = proxy.rpo
                    data = json.dumps(doc).encode()
                    date = parsedate_to_datetime(resp.getheader("Date")) + proxy.ahead
                    out = {k: v for k, v in out.items() if k.lower() != "date"}
                    out["Date"] = format_datetime(date, usegmt=True)
                self._send(resp.status, out, data)

            def _send(self, status: int, headers: dict, data: bytes):
                self.send_response_only(status)
                for k, v in headers.items():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                if not any(k.lower() == "date" for k in headers):
                    self.send_header("Date", self.date_time_string())
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RpoProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
