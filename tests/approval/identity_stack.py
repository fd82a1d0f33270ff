"""The production approval path on loopback: a Prefect server with its own password
(`PREFECT_SERVER_API_AUTH_STRING`), `lifeboat serve`'s proxied resume route, and HAProxy
with `deploy/haproxy/lifeboat.cfg` in front, authenticating people from a userlist."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEOPLE = {"alice@example.com": "alice-pw", "mallory@example.com": "mallory-pw"}  # the proxy's userlist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    proxy_url: str  # where people (browser, `lifeboat approve`) reach the UI and API
    prefect_url: str  # the Prefect server itself (workers); behind its own password
    server_auth: str  # PREFECT_SERVER_API_AUTH_STRING: what workers hold, never a person's
    serve_url: str  # lifeboat serve, reachable directly only in this test
    proxy_secret: str


def _wait_healthy(url: str, proc: subprocess.Popen, what: str, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not start: {log.read_text()[-3000:] if log.exists() else ''}")


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def _prefect_server(home: Path, port: int, auth: str, ui_api_url: str):
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_API_AUTH_STRING": auth,
        "PREFECT_UI_API_URL": ui_api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    env.pop("PREFECT_API_URL", None)
    log = home / "server.log"
    home.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_healthy(f"http://127.0.0.1:{port}/api/health", proc, "the Prefect server", log)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(proc)


@contextlib.contextmanager
def _serve(port: int, proxy_secret: str, signing_key, prefect_url: str, server_auth: str):
    """lifeboat serve's proxied decision routes, in a thread, talking to Prefect as a worker does."""
    import uvicorn
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from lifeboat_dr.shell.approvals import ProxySettings, approval_routes
    from lifeboat_dr.shell.server import create_app, server_config

    app = create_app(approval_routes(ProxySettings(proxy_secret=proxy_secret), signing_key))
    server = uvicorn.Server(server_config(app, "127.0.0.1", port, log_level="warning"))
    with temporary_settings(
        updates={PREFECT_API_URL: f"{prefect_url}/api", PREFECT_API_AUTH_STRING: server_auth}
    ):
        ctx = contextvars.copy_context()
    thread = threading.Thread(target=ctx.run, args=(asyncio.run, server.serve()), daemon=True)
    thread.start()
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/healthz", None, "lifeboat serve", Path("/nonexistent"), 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def _haproxy(
    folder: Path, port: int, prefect_port: int, serve_port: int, server_auth: str, proxy_secret: str
):
    users = folder / "users.cfg"
    users.write_text(
        "userlist people\n" + "".join(f"    user {u} insecure-password {p}\n" for u, p in PEOPLE.items())
    )
    env = {
        **os.environ,
        "LISTEN_ADDR": f"127.0.0.1:{port}",
        "PREFECT_ADDR": f"127.0.0.1:{prefect_port}",
        "PREFECT_SERVER_BASIC": base64.b64encode(server_auth.encode()).decode(),
        "LIFEBOAT_ADDR": f"127.0.0.1:{serve_port}",
        "LIFEBOAT_PROXY_SECRET": proxy_secret,
    }
    log = folder / "haproxy.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [shutil.which("haproxy"), "-db", "-f", str(users), "-f", str(ROOT / "deploy/haproxy/lifeboat.cfg")],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_healthy(f"http://127.0.0.1:{port}/api/health", proc, "haproxy", log, 30)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(proc)


@contextlib.contextmanager
def identity_stack(folder: Path, keys):
    """Prefect (own password) ← HAProxy (people) → lifeboat serve (signs with `keys.signing`) → Prefect."""
    server_auth, proxy_secret = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    proxy_port, prefect_port, serve_port = free_port(), free_port(), free_port()
    with (
        _prefect_server(
            folder / "prefect", prefect_port, server_auth, f"http://127.0.0.1:{proxy_port}/api"
        ) as prefect,
        _serve(serve_port, proxy_secret, keys.signing, prefect, server_auth) as serve,
        _haproxy(folder, proxy_port, prefect_port, serve_port, server_auth, proxy_secret) as proxy,
    ):
        try:
            yield Stack(proxy, prefect, server_auth, serve, proxy_secret)
        finally:  # deliver the runs' last events and logs while this server still answers
            from prefect.events.worker import EventsWorker
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=15)
            EventsWorker.drain_all(timeout=15)
