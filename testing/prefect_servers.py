"""Real control-plane servers on loopback for tests and benchmarks: a `prefect server start`
process (SQLite, or PostgreSQL given a URL), a private PostgreSQL cluster in a temporary
folder (Debian's `postgresql` package: `apt-get install -y postgresql`), a private Redis
(Debian's `redis-server`), and Prefect's multi-server control plane on those two
(`ha_control_plane`: API servers behind HAProxy, one background-services process).

All are context managers that stop what they started, and only that.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.testing.emulators import stop


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


def postgres_database(cluster_url: str, name: str) -> str:
    """A new, empty database `name` in the cluster `postgres_cluster` yielded; returns its URL
    (one Prefect server per database: two never share a schema)."""
    where = urlsplit(cluster_url)
    done = subprocess.run(
        [postgres_bin("createdb"), "-h", where.hostname, "-p", str(where.port), "-U", where.username, name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise ProviderUnavailable(f"createdb {name} failed: {(done.stdout + done.stderr).strip()[-500:]}")
    return urlunsplit(where._replace(path=f"/{name}"))


@contextmanager
def prefect_server(database_url: str | None = None, *, home: Path | None = None, **env: str) -> Iterator[str]:
    """`prefect server start` on a free loopback port with its background services (the lease
    repossessor every 2 s) and, unless PREFECT_MESSAGING_BROKER names another, Lifeboat's broker
    (`shell/prefect_broker.py`: the automations' actions 32 at once); SQLite in a temporary
    PREFECT_HOME unless `database_url`. Yields the API URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lifeboat-prefect-") as tmp:
        environ = {
            "PREFECT_MESSAGING_BROKER": "lifeboat_dr.shell.prefect_broker",  # actions 32 at once
            **os.environ,
            "PREFECT_HOME": str(home or tmp),
            "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_URL": "",
            **env,
        }
        if database_url:
            environ["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
        proc = subprocess.Popen(  # this interpreter (the `prefect` script's may be another's)
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
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
            stop(proc, timeout=20)


class RedisMissing(ProviderUnavailable):
    """Redis's server is not installed here."""


def _redis_binary() -> str:
    found = shutil.which("redis-server") or next(iter(glob.glob("/usr/bin/redis-server")), None)
    if not found:
        raise RedisMissing("redis-server is not installed (apt-get install -y redis-server)")
    return found


@contextmanager
def redis_server() -> Iterator[str]:
    """A private `redis-server` on 127.0.0.1, nothing saved to disk (Debian's `redis-server`
    package); yields its URL, `redis://127.0.0.1:PORT`."""
    binary, port = _redis_binary(), free_port()
    with tempfile.TemporaryDirectory(prefix="lifeboat-redis-") as tmp:
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [binary, *args, "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not _redis_answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ProviderUnavailable("redis-server did not come up")
                time.sleep(0.1)
            yield f"redis://127.0.0.1:{port}"
        finally:
            stop(proc)


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_messaging(redis_url: str) -> dict[str, str]:
    """The settings Prefect's scaling guide gives every API server and the background
    services: events, their ordering and dedupe, concurrency leases and the services' task
    queue (Docket) in Redis (the `prefect-redis` package), so that no server keeps any of it
    in its own memory."""
    where = urlsplit(redis_url)
    return {
        "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
        "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
        "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
        "PREFECT_REDIS_MESSAGING_HOST": where.hostname or "127.0.0.1",
        "PREFECT_REDIS_MESSAGING_PORT": str(where.port or 6379),
        "PREFECT_REDIS_MESSAGING_DB": "0",
        "PREFECT_SERVER_DOCKET_URL": f"redis://{where.hostname}:{where.port or 6379}/1",
    }


class Process:
    """One control-plane process the test may kill and start again, its output in `log`."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path):
        self.name, self.args, self.env, self.log = name, args, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:  # the child keeps its own copy of the file
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """`sig` to the whole process group (SIGKILL: as its host dies), and wait for it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class HaControlPlane:
    """Prefect as its scaling guide runs it: `url` is the load balancer's API URL (what
    workers, `lifeboat serve` and flows use); `api` the API servers behind it; `services`
    the one background-services process."""

    url: str
    api: list[Process]
    api_urls: list[str]
    services: Process
    balancer: Process

    def restart(self, server: Process, timeout: float = 120) -> None:
        """Start a killed API server again and wait until it answers."""
        server.start()
        _wait_up(self.api_urls[self.api.index(server)], server, timeout)


def _wait_up(api_url: str, proc: Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"{api_url}/health", timeout=2)
            return
        except OSError:
            if not proc.alive or time.monotonic() > deadline:
                tail = proc.log.read_text(errors="replace")[-2000:] if proc.log.exists() else ""
                raise ProviderUnavailable(f"{proc.name} did not come up: {tail}") from None
            time.sleep(0.3)


@contextmanager
def ha_control_plane(
    database_url: str, redis_url: str, balancer_cfg: Path, folder: Path, *, servers: int = 2, **env: str
) -> Iterator[HaControlPlane]:
    """Prefect's multi-server topology on loopback: the database migrated once, `servers` ×
    `prefect server start --no-services` on PostgreSQL with Redis messaging, one `prefect
    server services start` (scheduler, triggers, actions, repossessor…: they answer events
    and write to the database, and take no requests), and HAProxy with `balancer_cfg`
    (deploy/haproxy/prefect-api.cfg) in front. Logs in `folder`; stops all it started."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        raise ProviderUnavailable("haproxy is not installed (apt-get install -y haproxy)")
    prefect = [sys.executable, "-m", "prefect"]  # this interpreter's, with prefect-redis beside it
    environ = {
        **os.environ,
        "PREFECT_HOME": str(folder / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": "",
        "PREFECT_API_DATABASE_CONNECTION_URL": database_url,
        "PREFECT_API_DATABASE_MIGRATE_ON_START": "false",  # migrated once, below
        "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2",
        **redis_messaging(redis_url),
        **env,
    }
    migrated = subprocess.run(
        [*prefect, "server", "database", "upgrade", "-y"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if migrated.returncode != 0:
        raise ProviderUnavailable(
            f"prefect server database upgrade failed: {(migrated.stdout + migrated.stderr)[-1500:]}"
        )
    ports = [free_port() for _ in range(servers)]
    api = [
        Process(
            f"api{i + 1}",
            [*prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-services"],
            environ,
            folder / f"api{i + 1}.log",
        )
        for i, port in enumerate(ports)
    ]
    services = Process(
        "services", [*prefect, "server", "services", "start"], environ, folder / "services.log"
    )
    lb_port = free_port()
    balancer = Process(
        "balancer",
        [haproxy, "-db", "-f", str(balancer_cfg)],
        {
            **os.environ,
            "LISTEN_ADDR": f"127.0.0.1:{lb_port}",
            **{f"PREFECT_API_{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(ports)},
        },
        folder / "balancer.log",
    )
    plane = HaControlPlane(
        f"http://127.0.0.1:{lb_port}/api",
        api,
        [f"http://127.0.0.1:{p}/api" for p in ports],
        services,
        balancer,
    )
    started = [*api, services, balancer]
    try:
        # One at a time: each server registers Prefect's block types as it starts, and two
        # doing it at once collide on PostgreSQL's unique slugs (the later one exits).
        for server, url in zip(api, plane.api_urls, strict=True):
            server.start()
            _wait_up(url, server, 180)
        services.start()
        balancer.start()
        _wait_up(plane.url, balancer, 30)
        if not services.alive:
            raise ProviderUnavailable(
                f"prefect server services start exited: {services.log.read_text()[-2000:]}"
            )
        yield plane
    finally:
        for proc in reversed(started):
            proc.kill(signal.SIGTERM)
