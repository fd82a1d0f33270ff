"""`lifeboat serve`: one small Starlette app for the outside world's callbacks, on a uvicorn
that does not wait for slow clients.

Routes come from the providers that own each protocol: Alertmanager webhooks
(`POST /alerts/alertmanager`), Slack interactivity (`POST /slack/actions`) and the identity
proxy's decision routes. Anyone on the network can open a connection, so each one gets
deadlines (`Limits`): the request head within `header_s` (a client dribbling headers is cut
off), the body within `body_s` of the head, and no more than `max_connections` at once (the
rest are closed on arrival). uvicorn alone has neither deadline: 800 slow-header connections
stay open, each holding its buffers, for as long as their senders like.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from lifeboat_dr.shell.inbound import BadRequest, read_capped


async def _healthz(request):
    return PlainTextResponse("ok")


def create_app(routes: list[Route] | None = None) -> Starlette:
    """The app with the health check plus the given provider routes."""
    return Starlette(routes=[Route("/healthz", _healthz), *(routes or [])])


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most `limit` bytes (413 past it); a client that hung up or was
    cut off by a deadline mid-body is a 400, never a traceback."""
    try:
        return await read_capped(request.stream(), request.headers.get("content-length"), limit)
    except ClientDisconnect:
        raise BadRequest(400, "the request body did not arrive") from None


@dataclass(frozen=True)
class Limits:
    """How long a client may take, and how many may be connected at once."""

    header_s: float = 10.0  # the request line and headers, from connect (or the previous answer)
    body_s: float = 30.0  # the whole body, from the end of the headers
    max_connections: int = 2048  # open connections; clamped below the process's file limit

    def connections(self) -> int:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return max(1, min(self.max_connections, soft - 64)) if soft > 0 else self.max_connections


def guarded_protocol(limits: Limits):
    """uvicorn's h11 protocol with `limits` enforced per connection."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    cap = limits.connections()

    class Guarded(H11Protocol):
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > cap:  # over the cap: closed before a byte is read
                transport.close()
                return
            self._expect(limits.header_s)

        def connection_lost(self, exc) -> None:
            self._cancel()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            waiting_head = self.conn.their_state is h11.IDLE
            super().handle_events()
            if self.transport.is_closing():
                return
            state = self.conn.their_state
            if waiting_head and state is not h11.IDLE:  # the head arrived
                self._cancel()
                if state is h11.SEND_BODY:
                    self._expect(limits.body_s)
            elif not waiting_head and state is h11.DONE:  # the body arrived
                self._cancel()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # a kept-alive connection: the next head is due
                self._expect(limits.header_s)

        def _expect(self, seconds: float) -> None:
            self._cancel()
            self._timer = self.loop.call_later(seconds, self._late)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _late(self) -> None:
            self._timer = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):  # still sending: cut off
                self.transport.close()

    return Guarded


def server_config(app, host: str, port: int, limits: Limits | None = None, **kw):
    """The uvicorn configuration `lifeboat serve` runs with (tests start the same)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(limits or Limits()),
        ws="none",
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,  # a slow client cannot hold a restart hostage
        **kw,
    )
