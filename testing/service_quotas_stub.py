"""A loopback stub of AWS Service Quotas' `GetServiceQuota` (JSON 1.1 over HTTP), for the real
boto3 adapter: moto serves Service Quotas for `vpc` only, not EC2's vCPU limits.

It answers as the service does: the quota of the region named in the request's SigV4 scope,
`NoSuchResourceException` (400) for a code it does not hold, `AccessDeniedException` (400) for a
denied region, and a 503 `ServiceUnavailableException` for a failing one.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TARGET = "ServiceQuotasV20190624.GetServiceQuota"
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/servicequotas/aws4_request")


class ServiceQuotasStub:
    """`with ServiceQuotasStub({("us-west-2", "L-417A185B"): 1536}) as stub:` serves at `stub.url`."""

    def __init__(self, limits: dict[tuple[str, str], float] | None = None):
        self.limits = dict(limits or {})
        self.denied: set[str] = set()
        self.failing: set[str] = set()
        self.requests = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.requests += 1
                scope = _SCOPE.search(self.headers.get("Authorization", ""))
                region = scope.group(1) if scope else ""
                code = body.get("QuotaCode", "")
                if self.headers.get("X-Amz-Target") != TARGET:
                    self._answer(400, "UnknownOperationException", "only GetServiceQuota is stubbed")
                elif region in stub.failing:
                    self._answer(503, "ServiceUnavailableException", "the service is unavailable")
                elif region in stub.denied:
                    self._answer(400, "AccessDeniedException", "not authorized to perform GetServiceQuota")
                elif body.get("ServiceCode") != "ec2" or (region, code) not in stub.limits:
                    self._answer(400, "NoSuchResourceException", f"the quota {code} does not exist")
                else:
                    quota = {"ServiceCode": "ec2", "QuotaCode": code, "Value": stub.limits[(region, code)]}
                    self._send(200, {"Quota": quota})

            def _answer(self, status: int, kind: str, message: str):
                self._send(status, {"__type": kind, "message": message})

            def _send(self, status: int, doc: dict):
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ServiceQuotasStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
