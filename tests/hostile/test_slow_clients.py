"""Slow clients against the real `lifeboat serve` process: 800 connections dribbling their
headers and 300 that stall mid-body, unauthenticated. The server keeps answering healthy
requests meanwhile, its memory stays bounded, and it cuts every slow one off at its deadline;
past `--max-connections`, a connection is closed on arrival."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARDED = ROOT / "tests/detect/runbooks/guarded.yaml"
HEADER_S, BODY_S = 3, 5


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(tmp_path, *flags: str):
    port = _port()
    env = {
        **os.environ,
        "LIFEBOAT_ALERTMANAGER_TOKEN": "am-token",
        "LIFEBOAT_STATE_DIR": str(tmp_path / "state"),
        "PREFECT_API_URL": "http://127.0.0.1:9/api",  # nothing here reaches Prefect
    }
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lifeboat_dr", "serve", str(GUARDED), "--port", str(port), *flags],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not healthy(port):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        yield proc, port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)


def healthy(port: int, timeout: float = 2) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as r,
    ):
        return r.status == 200 and r.read() == b"ok"
    return False


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_slow(port: int, n: int, first: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(first)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server hung up (an answer it sent first is read and dropped)."""
    s.setblocking(False)
    try:
        while data := s.recv(65536):
            del data
        return True  # end of stream
    except BlockingIOError:
        return False  # still open, nothing more to read
    except OSError:
        return True  # reset


@pytest.fixture
def no_fd_limit():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_800_slow_headers_and_300_stalled_bodies_are_cut_off_and_healthy_requests_still_answered(
    tmp_path, no_fd_limit
):
    with serve(tmp_path, "--header-timeout", str(HEADER_S), "--body-timeout", str(BODY_S)) as (proc, port):
        before = rss_mib(proc.pid)
        heads = open_slow(port, 800, b"POST /alerts/alertmanager HTTP/1.1\r\nHost: lifeboat\r\nX-Slow: ")
        headed = time.monotonic()  # each deadline runs from its connection's arrival: the last one's
        body_head = (
            b"POST /alerts/alertmanager HTTP/1.1\r\nHost: lifeboat\r\nContent-Type: application/json\r\n"
            b"Content-Length: 900000\r\n%s\r\n" + b"[" * 1000
        )
        bodies = open_slow(port, 150, body_head % b"Authorization: Bearer am-token\r\n")  # read by the app
        bodies += open_slow(port, 150, body_head % b"")  # answered 401 at once, body never read
        bodied = time.monotonic()
        try:
            for s in heads[::50]:  # a few of them keep dribbling: still cut off at the deadline
                s.sendall(b"a")
            served = [healthy(port, timeout=5) for _ in range(20)]
            assert all(served), f"{served.count(False)} of 20 healthy requests unanswered under the attack"
            during = rss_mib(proc.pid)
            assert during - before < 64, f"RSS {before:.0f} -> {during:.0f} MiB with 1,100 slow connections"
            time.sleep(max(0.0, headed + HEADER_S + 2 - time.monotonic()))
            still = [s for s in heads if not closed_by_server(s)]
            assert still == [], (
                f"{len(still)} of 800 slow-header connections still open after {HEADER_S + 2}s"
            )
            time.sleep(max(0.0, bodied + HEADER_S + BODY_S + 3 - time.monotonic()))
            still = [s for s in bodies if not closed_by_server(s)]
            assert still == [], f"{len(still)} of 300 stalled bodies still open after the body deadline"
            assert healthy(port)
        finally:
            for s in heads + bodies:
                s.close()
        assert "Traceback" not in (tmp_path / "serve.log").read_text()


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_connections_over_the_cap_are_closed_on_arrival(tmp_path, no_fd_limit):
    with serve(tmp_path, "--max-connections", "50") as (_, port):
        idle = open_slow(port, 80, b"")
        try:
            time.sleep(1)
            dropped = sum(closed_by_server(s) for s in idle)
            assert dropped >= 30, f"only {dropped} of 80 connections over a cap of 50 were closed"
        finally:
            for s in idle:
                s.close()
        assert healthy(port)  # once they are gone, the server answers again
