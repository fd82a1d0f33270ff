"""Start a real HAProxy on loopback in front of local servers: for tests, drills and the demo.

Debian's `haproxy` package (`apt-get install haproxy`). Nothing runs at import; the context
manager writes a config into a temporary folder, starts `haproxy -db` in the foreground,
waits for its stats socket (admin level) and frontend, and stops it on exit. Health checks
run every 200 ms (`GET /healthz`, one failure marks a server down) so the router's own view
of a dead site is fresh.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable


@dataclass(frozen=True)
class LocalHaproxy:
    frontend: str  # http://127.0.0.1:PORT, where clients send requests
    socket: str  # the runtime API's unix socket path
    backend: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(backend: str, servers: Mapping[str, tuple[str, int, int]], port: int, sock: Path) -> str:
    lines = [
        "global",
        f"    stats socket {sock} mode 600 level admin",
        "defaults",
        "    mode http",
        "    timeout connect 1s",
        "    timeout client 10s",
        "    timeout server 10s",
        "    timeout queue 5s",
        "    retries 1",
        "    option redispatch",
        "frontend fe",
        f"    bind 127.0.0.1:{port}",
        f"    default_backend {backend}",
        f"backend {backend}",
        "    balance roundrobin",
        "    option httpchk GET /healthz",
        "    default-server inter 200ms fall 1 rise 1",
    ]
    lines += [f"    server {name} {h}:{p} weight {w} check" for name, (h, p, w) in servers.items()]
    return "\n".join(lines) + "\n"


@contextmanager
def local_haproxy(
    backend: str, servers: Mapping[str, tuple[str, int, int]], *, start_timeout: float = 10.0
) -> Iterator[LocalHaproxy]:
    """HAProxy routing `backend` to `servers` (name -> (host, port, initial weight))."""
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        raise ConfigError("haproxy is not installed: apt-get install -y haproxy")
    with tempfile.TemporaryDirectory(prefix="lifeboat-haproxy-") as tmp:
        sock, port = Path(tmp) / "admin.sock", free_port()
        cfg = Path(tmp) / "haproxy.cfg"
        cfg.write_text(_config(backend, servers, port, sock))
        log = open(Path(tmp) / "haproxy.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen([binary, "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + start_timeout
            while not (sock.exists() and _accepts(port)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise ProviderUnavailable(
                        f"haproxy did not start: {(Path(tmp) / 'haproxy.log').read_text()[-400:]}"
                    )
                time.sleep(0.05)
            yield LocalHaproxy(f"http://127.0.0.1:{port}", str(sock), backend)
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False
