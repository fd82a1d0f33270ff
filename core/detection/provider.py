"""The provider/region signal: is the primary's control plane answering, and with capacity?

A `ControlPlane` (`providers/health/control_plane.py`, with its real adapters and fake)
answers one `ping()`; the probe pings a few times and fails when too many attempts error out
or report no capacity. A single slow or failed call is weather, not an outage.
"""

from __future__ import annotations

from lifeboat_dr.core.detection.signals import Clock, Reading, Status, utc_now
from lifeboat_dr.providers.health.control_plane import ControlPlane


class ProviderProbe:
    """Pings `attempts` times; fails when more than `max_error_rate` of them go wrong."""

    signal = "provider"

    def __init__(
        self, plane: ControlPlane, *, attempts: int = 3, max_error_rate: float = 0.5, clock: Clock = utc_now
    ):
        self.plane, self.attempts, self.max_error_rate, self.clock = plane, attempts, max_error_rate, clock
        self.source = f"control-plane:{plane.name}"
        self.target = getattr(plane, "target", None) or plane.name  # the endpoint it pings

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
            evidence["unreachable"] = what == "unreachable"
            if evidence["unreachable"]:
                evidence["target"] = self.target
            return Reading(self.signal, self.source, Status.failing, now, summary, evidence)
        return Reading(
            self.signal,
            self.source,
            Status.ok,
            now,
            f"{self.plane.name} answering ({len(errors)} errors)",
            evidence,
        )
