"""Real control-plane servers on loopback for tests and benchmarks: a `prefect server start`
process (SQLite, or PostgreSQL given a URL) and a private PostgreSQL cluster in a temporary
folder (Debian's `postgresql` package: `apt-get install -y postgresql`).

Both are context managers that stop what they started, and only that.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lifeboat_dr.kernel.errors import ProviderUnavailable


class PostgresMissing(ProviderUnavailable):
    """PostgreSQL's server binaries are not installed here."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin(name: str) -> str:
    """`initdb`/`pg_ctl` from PATH or Debian's /usr/lib/postgresql/<version>/bin (newest)."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        raise PostgresMissing(f"PostgreSQL's {name} is not installed (apt-get install -y postgresql)")
    return found


@contextmanager
def postgres_cluster() -> Iterator[str]:
    """A fresh PostgreSQL cluster on 127.0.0.1; yields its SQLAlchemy asyncpg URL. As root the
    server runs as the `postgres` user (it refuses root)."""
    initdb, pg_ctl = postgres_bin("initdb"), postgres_bin("pg_ctl")
    user = None
    if os.geteuid() == 0:
        import pwd

        try:
            user = pwd.getpwnam("postgres").pw_name
        except KeyError:
            raise PostgresMissing(
                "running as root and there is no `postgres` user to run PostgreSQL as"
            ) from None
    root = Path(tempfile.mkdtemp(prefix="lifeboat-pg-"))
    if user:
        shutil.chown(root, user)
    data, port = root / "data", free_port()

    def run(*args: str) -> None:
        done = subprocess.run(args, user=user, capture_output=True, text=True, cwd=root, timeout=120)
        if done.returncode != 0:
            raise ProviderUnavailable(
                f"{Path(args[0]).name} failed: {(done.stdout + done.stderr).strip()[-500:]}"
            )

    try:
        run(initdb, "-D", str(data), "-A", "trust", "-U", "lifeboat", "-E", "UTF8", "--no-sync")
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        run(pg_ctl, "-D", str(data), "-l", str(root / "log"), "-o", opts, "-w", "-t", "60", "start")
        try:
            yield f"postgresql+asyncpg://lifeboat@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                [pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
                user=user,
                capture_output=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def prefect_server(database_url: str | None = None, *, home: Path | None = None, **env: str) -> Iterator[str]:
    """`prefect server start` on a free loopback port with its background services (the lease
    repossessor every 2 s); SQLite in a temporary PREFECT_HOME unless `database_url`. Yields
    the API URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lifeboat-prefect-") as tmp:
        environ = {
            **os.environ,
            "PREFECT_HOME": str(home or tmp),
            "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_URL": "",
            **env,
        }
        if database_url:
            environ["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
        prefect = str(Path(sys.executable).parent / "prefect")
        proc = subprocess.Popen(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + 120
        try:
            while True:
                try:
                    urllib.request.urlopen(f"{url}/health", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise ProviderUnavailable("prefect server start did not come up") from None
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
