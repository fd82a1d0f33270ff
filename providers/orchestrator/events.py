"""Where a training job's guard sends its fault event: one small interface, two backends.

`EventSink.emit(event, resource, payload, id)` sends one event and returns once it is sent
(the guard's process exits right after). `PrefectEvents` is Prefect's events API (through
`prefect_api.emit`, the one module that calls it) and waits for the events client to send;
`FileEvents` (`fake_events.py`) appends JSON lines to a file, so a test reads what every
rank of a torchrun job emitted. `events_from_env` picks one for a job:

    $LIFEBOAT_GUARD_EVENTS=file:///path   FileEvents (drills, tests)
    $PREFECT_API_URL set                  PrefectEvents (the watch's automations see it)
    neither                               None: the guard prints the event as one JSON line

An event's `id` is stable (the same fault seen by two ranks is stored once by Prefect).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

EVENTS_ENV = "LIFEBOAT_GUARD_EVENTS"
SEND_TIMEOUT_S = 10.0  # how long a dying job waits for Prefect to take its event


class EventSink(Protocol):
    def emit(self, event: str, resource: dict[str, str], payload: dict[str, Any], *, id: str) -> None:
        """Send one event; raises `ProviderUnavailable` when it could not be handed over."""


class PrefectEvents:
    """Prefect's events API; `emit` returns when the events client has sent (or timed out)."""

    def __init__(self, timeout_s: float = SEND_TIMEOUT_S):
        self.timeout_s = timeout_s

    def emit(self, event: str, resource: dict[str, str], payload: dict[str, Any], *, id: str) -> None:
        from uuid import UUID

        from lifeboat_dr.providers.orchestrator.prefect_api import drain_events, emit

        emit(event, resource, payload, id=UUID(id))
        drain_events(self.timeout_s)


def events_from_env(env: dict[str, str] | None = None) -> EventSink | None:
    """The sink a guarded job sends to (see the module docstring)."""
    env = os.environ if env is None else env
    where = env.get(EVENTS_ENV, "")
    if where:
        from lifeboat_dr.providers.orchestrator.fake_events import FileEvents

        return FileEvents(where.removeprefix("file://"))
    if env.get("PREFECT_API_URL"):
        return PrefectEvents()
    return None
