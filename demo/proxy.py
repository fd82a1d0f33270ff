"""`make demo --approve-in-ui`: the identity proxy of docs/approvals.md, on this machine.

A decision in the Prefect UI counts only with a verified login, so the demo puts the
production path in front of its Prefect server: HAProxy (`deploy/haproxy/lifeboat.cfg`)
authenticating one person, `oncall`, with a fresh password, and `lifeboat serve` signing
what they decide with a fresh Ed25519 key (its file 0600 in the demo's folder; the flow gets
only the public key). `runbooks/demo.yaml` maps `oncall` to its approver. Every secret
lives as long as the demo.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

LOGIN = "oncall"  # runbooks/demo.yaml: approval.logins


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DemoProxy:
    """Ports and secrets of the demo's identity proxy; `server_env` goes to the Prefect server."""

    port: int = field(default_factory=_free_port)
    serve_port: int = field(default_factory=_free_port)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(9))
    server_auth: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    proxy_secret: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    public_key: str = ""  # LIFEBOAT_APPROVAL_PUBLIC_KEYS for the flow, once `running`

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def server_env(self) -> dict[str, str]:
        return {"PREFECT_SERVER_API_AUTH_STRING": self.server_auth, "PREFECT_UI_API_URL": f"{self.url}/api"}

    @contextlib.contextmanager
    def running(self, prefect_url: str, folder: Path):
        """`lifeboat serve` and HAProxy in front of the Prefect server at `prefect_url`."""
        haproxy = shutil.which("haproxy")
        if haproxy is None:
            raise SystemExit("--approve-in-ui needs HAProxy as the identity proxy: apt-get install haproxy")
        from lifeboat_dr.core.approval_keys import generate, public_text

        users = folder / "users.cfg"
        users.write_text(f"userlist people\n    user {LOGIN} insecure-password {self.password}\n")
        key_file = folder / "approval-signing.pem"
        key_file.unlink(missing_ok=True)  # a fresh key each demo
        self.public_key = public_text(generate(key_file))
        serve_env = {
            **os.environ,
            "LIFEBOAT_PROXY_SECRET": self.proxy_secret,
            "LIFEBOAT_APPROVAL_SIGNING_KEY_FILE": str(key_file),
            "PREFECT_API_URL": f"{prefect_url}/api",
            "PREFECT_API_AUTH_STRING": self.server_auth,
        }
        proxy_env = {
            **os.environ,
            "LISTEN_ADDR": f"127.0.0.1:{self.port}",
            "PREFECT_ADDR": prefect_url.removeprefix("http://"),
            "PREFECT_SERVER_BASIC": base64.b64encode(self.server_auth.encode()).decode(),
            "LIFEBOAT_ADDR": f"127.0.0.1:{self.serve_port}",
            "LIFEBOAT_PROXY_SECRET": self.proxy_secret,
        }
        cfg = str(resources.files(__package__).joinpath("haproxy.cfg"))  # deploy/haproxy/lifeboat.cfg
        with open(folder / "identity-proxy.log", "wb") as log:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "lifeboat_dr", "serve", "--port", str(self.serve_port)],
                    env=serve_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ),
                subprocess.Popen(
                    [haproxy, "-db", "-f", str(users), "-f", cfg],
                    env=proxy_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ),
            ]  # fmt: skip
            try:
                for url in (f"http://127.0.0.1:{self.serve_port}/healthz", f"{self.url}/api/health"):
                    _wait(url, procs, folder / "identity-proxy.log")
                yield self
            finally:
                for proc in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=15)
                key_file.unlink(missing_ok=True)


def _wait(url: str, procs: list[subprocess.Popen], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.3)
    raise SystemExit(f"the identity proxy did not start; see {log}")
