"""The front doors under attack: `lifeboat serve`'s app under real uvicorn on loopback,
reached by a raw-socket client that sends exactly the bytes an attacker would (bad
headers, a lying Content-Length, an endless chunked body), and an ASGI wrapper that
counts the body bytes the app actually read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pytest


class CountingApp:
    """ASGI wrapper: how many body bytes the app pulled from the server, per request."""

    def __init__(self, app):
        self.app, self.read = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        index = len(self.read)
        self.read.append(0)

        async def counting_receive():
            message = await receive()
            self.read[index] += len(message.get("body", b""))
            return message

        return await self.app(scope, counting_receive, send)


@dataclass
class Answer:
    status: int
    body: str
    sent: int  # body bytes the client had written when the answer came


def raw_request(port: int, head: str, chunks: Iterable[bytes] = (), *, chunked: bool = False) -> Answer:
    """Send `head` (request line + headers, CRLF-terminated lines, no blank line) and then
    `chunks` until the server answers or closes; stop sending as soon as it does."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n")
        sent = 0
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered (or hung up) mid-body: the attacker stops here
            data = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        else:
            if chunked:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(b"0\r\n\r\n")
        reply = b""
        sock.settimeout(30)
        try:
            while b"\r\n\r\n" not in reply or len(reply) < _expected_length(reply):
                data = sock.recv(65536)
                if not data:
                    break
                reply += data
        except (ConnectionResetError, TimeoutError):
            pass
    status_line, _, rest = reply.partition(b"\r\n")
    status = int(status_line.split()[1]) if status_line else 0
    return Answer(status, rest.partition(b"\r\n\r\n")[2].decode("utf-8", "replace"), sent)


def _expected_length(reply: bytes) -> int:
    head, _, _ = reply.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(head) + 4 + int(value)
    return len(reply)


class LiveServer:
    def __init__(self, app):
        import uvicorn

        self.app = CountingApp(app)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, log_config=None, lifespan="off", ws="none"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def no_server_errors(caplog):
    """Fails the test if the app or the server logged an error (a traceback, a 500)."""
    caplog.set_level(logging.WARNING)
    yield caplog
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert "Traceback" not in caplog.text
