"""The model-endpoint interface: ask a serving site something over HTTP and time the answer.

Two primitives, `get` and `post`, each returning an `Answer` and never raising for a site
that is down, slow or wrong: those are answers the failover judges (status 0 means no HTTP
answer at all: refused, reset, timed out). Health, model version and the canary are written
once on top of them in `lifeboat_dr.core.serving.verify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Answer:
    """One request's outcome as the client saw it."""

    status: int  # HTTP status; 0 when no HTTP answer came (refused, reset, timeout)
    latency_s: float  # request sent -> answer read (or the failure)
    body: Any = None  # the JSON body, when it was JSON
    error: str = ""  # why there was no usable answer, one line

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@runtime_checkable
class ModelEndpoint(Protocol):
    url: str

    def get(self, path: str, *, timeout: float) -> Answer:
        """GET `path`; the answer, whatever it is."""
        ...

    def post(self, path: str, body: dict, *, timeout: float) -> Answer:
        """POST `body` as JSON to `path`; the answer, whatever it is."""
        ...
