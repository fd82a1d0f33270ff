"""The provider/region signal: is the primary's control plane answering, and with capacity?

A `ControlPlane` answers one `ping()`; the probe pings a few times and fails when too many
attempts error out or report no capacity. A single slow or failed call is weather, not an
outage. Real control planes live in `providers/health/control_plane.py`; the fake is here
because the core's tests and the flows' dry runs both use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lifeboat.detection.signals import Clock, Reading, Status, utc_now


@dataclass(frozen=True)
class Attempt:
    """One call to the control plane."""

    ok: bool
    latency_s: float = 0.0
    error: str | None = None  # what went wrong, as the provider said it
    capacity: bool = False  # the provider answered "no capacity" (InsufficientInstanceCapacity, ...)


class ControlPlane(Protocol):
    name: str  # "aws/us-east-1", "s3://bucket": shown in the evidence

    def ping(self) -> Attempt:
        """One cheap authenticated call. Never raises: failures are `Attempt(ok=False)`."""
        ...


class FakeControlPlane:
    """A scripted control plane: `script` is consumed one ping at a time, then `mode` holds.

    mode "up" answers ok, "down" times out, "no_capacity" answers with a capacity error.
    """

    def __init__(self, name: str = "fake/region-1", mode: str = "up", script: list[str] | None = None):
        self.name, self.mode, self.script, self.pings = name, mode, list(script or []), 0

    def ping(self) -> Attempt:
        self.pings += 1
        mode = self.script.pop(0) if self.script else self.mode
        if mode == "up":
            return Attempt(True, 0.01)
        if mode == "no_capacity":
            return Attempt(False, 0.02, "InsufficientInstanceCapacity", capacity=True)
        return Attempt(False, 5.0, "connect timeout")


class ProviderProbe:
    """Pings `attempts` times; fails when more than `max_error_rate` of them go wrong."""

    signal = "provider"

    def __init__(
        self, plane: ControlPlane, *, attempts: int = 3, max_error_rate: float = 0.5, clock: Clock = utc_now
    ):
        self.plane, self.attempts, self.max_error_rate, self.clock = plane, attempts, max_error_rate, clock
        self.source = f"control-plane:{plane.name}"

    def check(self, previous: Reading | None = None) -> Reading:
        results = [self.plane.ping() for _ in range(self.attempts)]
        errors = [a for a in results if not a.ok]
        capacity = sum(a.capacity for a in errors)
        rate = len(errors) / len(results)
        evidence = {
            "control_plane": self.plane.name,
            "attempts": len(results),
            "errors": len(errors),
            "capacity_errors": capacity,
            "error_rate": round(rate, 3),
            "max_error_rate": self.max_error_rate,
            "error_samples": sorted({a.error for a in errors if a.error})[:3],
            "max_latency_s": round(max(a.latency_s for a in results), 3),
        }
        now = self.clock()
        if rate > self.max_error_rate:
            what = "no capacity" if capacity > len(errors) / 2 else "unreachable"
            summary = f"{self.plane.name} {what}: {len(errors)}/{len(results)} calls failed"
            return Reading(self.signal, self.source, Status.failing, now, summary, evidence)
        return Reading(
            self.signal,
            self.source,
            Status.ok,
            now,
            f"{self.plane.name} answering ({len(errors)} errors)",
            evidence,
        )
