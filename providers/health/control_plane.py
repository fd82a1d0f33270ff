"""Control planes for the provider signal (`lifeboat_dr.core.detection.provider.ProviderProbe`).

`ControlPlane` is the interface; `FakeControlPlane` the scripted fake.

`StoreControlPlane` asks the primary's object store about a key that need not exist: an
answer, even NotFound, means the region's API is up; a timeout or 5xx means it is not.
It works for every store scheme without one more cloud SDK. `HttpControlPlane` pings any
URL (a cloud API endpoint, a Kubernetes API server's /readyz).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from lifeboat_dr.kernel.errors import LifeboatError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.storage.base import store_target


@dataclass(frozen=True)
class Attempt:
    """One call to the control plane."""

    ok: bool
    latency_s: float = 0.0
    error: str | None = None  # what went wrong, as the provider said it
    capacity: bool = False  # the provider answered "no capacity" (InsufficientInstanceCapacity, ...)


class ControlPlane(Protocol):
    name: str  # "aws/us-east-1", "s3://bucket": shown in the evidence
    target: str  # the endpoint pinged (host:port, scheme://bucket): one unreachable target is one vote

    def ping(self) -> Attempt:
        """One cheap authenticated call. Never raises: failures are `Attempt(ok=False)`."""
        ...


class FakeControlPlane:
    """A scripted control plane: `script` is consumed one ping at a time, then `mode` holds.

    mode "up" answers ok, "down" times out, "no_capacity" answers with a capacity error.
    """

    def __init__(self, name: str = "fake/region-1", mode: str = "up", script: list[str] | None = None):
        self.name, self.mode, self.script, self.pings = name, mode, list(script or []), 0
        self.target = name

    def ping(self) -> Attempt:
        self.pings += 1
        mode = self.script.pop(0) if self.script else self.mode
        if mode == "up":
            return Attempt(True, 0.01)
        if mode == "no_capacity":
            return Attempt(False, 0.02, "InsufficientInstanceCapacity", capacity=True)
        return Attempt(False, 5.0, "connect timeout")


CAPACITY_MARKERS = ("InsufficientInstanceCapacity", "ZONE_RESOURCE_POOL_EXHAUSTED", "out of capacity")


class StoreControlPlane:
    def __init__(self, store: Any, probe_key: str = ".lifeboat-probe"):
        self.store, self.key, self.name = store, probe_key, store.uri
        self.target = store_target(store)

    def ping(self) -> Attempt:
        started = time.perf_counter()
        try:
            self.store.head(self.key)
        except NotFound:
            pass
        except (ProviderUnavailable, LifeboatError, OSError) as e:
            return Attempt(False, time.perf_counter() - started, f"{type(e).__name__}: {e}")
        return Attempt(True, time.perf_counter() - started)


class HttpControlPlane:
    def __init__(self, url: str, *, timeout_s: float = 5.0):
        from urllib.parse import urlparse

        self.url, self.timeout_s, self.name = url, timeout_s, url
        self.target = (urlparse(url).netloc or url).lower()

    def ping(self) -> Attempt:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s):
                pass
        except urllib.error.HTTPError as e:
            body = e.read(2048).decode(errors="replace")
            if e.code < 500:  # it answered: auth or not-found still means the API is up
                return Attempt(True, time.perf_counter() - started)
            capacity = any(m in body for m in CAPACITY_MARKERS)
            return Attempt(False, time.perf_counter() - started, f"HTTP {e.code}", capacity=capacity)
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            return Attempt(False, time.perf_counter() - started, f"unreachable: {getattr(e, 'reason', e)}")
        return Attempt(True, time.perf_counter() - started)
