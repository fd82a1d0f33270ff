"""Real control planes on loopback: an HTTP API that answers, errs, is out of capacity, or is gone."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lifeboat_dr.core.detection.provider import ProviderProbe
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.health.control_plane import HttpControlPlane, StoreControlPlane
from lifeboat_dr.providers.storage.local import LocalStore


class _Api(BaseHTTPRequestHandler):
    def do_GET(self):
        code, body = {
            "/ok": (200, b"ok"),
            "/forbidden": (403, b"AccessDenied"),
            "/broken": (503, b"ServiceUnavailable"),
            "/full": (500, b"InsufficientInstanceCapacity: no p5.48xlarge in us-east-1a"),
        }[self.path]
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # quick shutdown()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_api_that_answers_even_403_is_up(api):
    assert HttpControlPlane(f"{api}/ok").ping().ok and HttpControlPlane(f"{api}/forbidden").ping().ok


def test_5xx_is_an_error_and_capacity_errors_are_recognised(api):
    broken, full = HttpControlPlane(f"{api}/broken").ping(), HttpControlPlane(f"{api}/full").ping()
    assert (broken.ok, broken.capacity, full.ok, full.capacity) == (False, False, False, True)


def test_a_closed_port_is_unreachable_and_the_probe_fails(clock):
    reading = ProviderProbe(HttpControlPlane("http://127.0.0.1:9/", timeout_s=0.5), clock=clock).check()
    assert reading.failing and reading.evidence["errors"] == 3


def test_a_store_that_says_not_found_is_answering(tmp_path):
    assert StoreControlPlane(LocalStore(str(tmp_path))).ping().ok


def test_a_store_that_times_out_is_not(tmp_path):
    class Unreachable(LocalStore):
        def head(self, key):
            raise ProviderUnavailable("s3.us-east-1.amazonaws.com: connect timeout")

    attempt = StoreControlPlane(Unreachable(str(tmp_path))).ping()
    assert not attempt.ok and "connect timeout" in attempt.error
