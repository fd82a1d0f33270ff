"""Probes: each turns one outside observation into a `Reading`.

A probe never raises for what it observes: an unreadable heartbeat or store is an
`unknown` reading (no vote), not a crash. `check(previous)` receives the source's last
reading, so a probe can remember across scheduled runs without state of its own (the
training probe remembers when the step last moved).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from lifeboat_dr.core.detection.signals import Clock, Reading, Status, iso, parse_time, unreachable, utc_now
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import LifeboatError, NotFound


class Probe(Protocol):
    signal: str
    source: str
    # the endpoint it reads (`lifeboat_dr.providers.storage.base.store_target`): one unreachable target, one vote
    target: str | None

    def check(self, previous: Reading | None = None) -> Reading:
        """Look now. `previous` is this source's last reading, if any."""
        ...


@dataclass(frozen=True)
class Heartbeat:
    """What the training job last wrote: its step (if it says) and when it wrote."""

    step: int | None
    at: datetime


def parse_heartbeat(data: bytes, written_at: datetime) -> Heartbeat:
    """`{"step": 1200, "time": "...Z"}`, a bare step number, or anything (only its write time)."""
    text = data.decode(errors="replace").strip()
    try:
        doc = json.loads(text) if text else None
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        step = doc.get("step")
        at = parse_time(doc.get("time")) or written_at
        return Heartbeat(int(step) if isinstance(step, int | float) else None, at)
    if isinstance(doc, int) and not isinstance(doc, bool):
        return Heartbeat(doc, written_at)
    return Heartbeat(None, written_at)


def file_heartbeat(path: str | Path) -> Callable[[], Heartbeat | None]:
    """Reads a heartbeat file the job rewrites; None while it does not exist yet."""
    p = Path(path)

    def read() -> Heartbeat | None:
        try:
            data, mtime = p.read_bytes(), p.stat().st_mtime
        except FileNotFoundError:
            return None
        return parse_heartbeat(data, datetime.fromtimestamp(mtime, UTC))

    return read


def store_heartbeat(store: Any, key: str) -> Callable[[], Heartbeat | None]:
    """Reads a heartbeat object from a `lifeboat_dr.providers.storage` Store; None while it is missing."""

    def read() -> Heartbeat | None:
        try:
            info = store.head(key)
            data = b"".join(store.read(key))
        except NotFound:
            return None
        return parse_heartbeat(data, info.updated)

    return read


class TrainingProgressProbe:
    """No step progress for `stall_after` is a stall: the silent NCCL hang.

    A job whose heartbeat thread keeps rewriting the same step is stalled too: progress
    time is when the step last *changed*, carried across checks in the reading's evidence.
    """

    signal = "training_progress"

    def __init__(
        self,
        read: Callable[[], Heartbeat | None],
        stall_after: timedelta,
        *,
        source: str = "heartbeat",
        target: str | None = None,
        clock: Clock = utc_now,
    ):
        self.read, self.stall_after, self.source, self.clock = read, stall_after, source, clock
        self.target = target

    def check(self, previous: Reading | None = None) -> Reading:
        now = self.clock()
        try:
            hb = self.read()
        except (LifeboatError, OSError) as e:
            return self._reading(
                now, Status.unknown, f"heartbeat unreadable: {e}", unreachable(e, self.target)
            )
        if hb is None:
            return self._reading(now, Status.unknown, "no heartbeat written yet", {})
        progress_at = hb.at
        prev = previous.evidence if previous else {}
        if hb.step is not None and prev.get("step") == hb.step and prev.get("last_progress_at"):
            progress_at = min(parse_time(prev["last_progress_at"]), hb.at)
        quiet = max(now - progress_at, timedelta(0))
        evidence = {
            "step": hb.step,
            "heartbeat_at": iso(hb.at),
            "last_progress_at": iso(progress_at),
            "quiet_for": format_duration(quiet),
            "stall_after": format_duration(self.stall_after),
        }
        if quiet > self.stall_after:
            evidence["since"] = iso(progress_at)  # the job has made no progress since then
            where = f" at step {hb.step}" if hb.step is not None else ""
            return self._reading(
                now, Status.failing, f"no training progress{where} for {format_duration(quiet)}", evidence
            )
        return self._reading(now, Status.ok, f"last progress {format_duration(quiet)} ago", evidence)

    def _reading(self, now: datetime, status: Status, summary: str, evidence: dict) -> Reading:
        return Reading(self.signal, self.source, status, now, summary, evidence)


class CheckpointFreshnessProbe:
    """No new checkpoint within cadence x freshness_factor: the job (or its writes) stopped.

    `newest` returns the newest checkpoint's write time (None when there is none yet);
    which checkpoints count is the certify core's business, not this probe's.
    """

    signal = "checkpoint_freshness"

    def __init__(
        self,
        newest: Callable[[], datetime | None],
        cadence: timedelta,
        freshness_factor: float,
        *,
        source: str = "checkpoints",
        target: str | None = None,
        clock: Clock = utc_now,
    ):
        self.newest, self.limit, self.source, self.clock = newest, cadence * freshness_factor, source, clock
        self.target = target

    def check(self, previous: Reading | None = None) -> Reading:
        now = self.clock()
        try:
            newest = self.newest()
        except (LifeboatError, OSError) as e:
            summary = f"checkpoints unreadable: {e}"
            return Reading(
                self.signal, self.source, Status.unknown, now, summary, unreachable(e, self.target)
            )
        if newest is None:
            return Reading(self.signal, self.source, Status.unknown, now, "no checkpoint written yet")
        age = max(now - newest, timedelta(0))
        evidence = {
            "newest_at": iso(newest),
            "age": format_duration(age),
            "limit": format_duration(self.limit),
        }
        if age > self.limit:
            evidence["since"] = iso(newest + self.limit)  # stale from this moment on
            summary = f"newest checkpoint is {format_duration(age)} old (limit {format_duration(self.limit)})"
            return Reading(self.signal, self.source, Status.failing, now, summary, evidence)
        return Reading(
            self.signal,
            self.source,
            Status.ok,
            now,
            f"newest checkpoint {format_duration(age)} old",
            evidence,
        )


class GpuHealthReadingProbe:
    """Wraps a `lifeboat_dr.providers.health` probe: degraded GPUs fail, no driver is `unknown`."""

    signal = "gpu_health"
    target = None  # the local driver: never an unreachable endpoint

    def __init__(self, gpu_probe: Any, *, clock: Clock = utc_now):
        self.gpu_probe, self.clock = gpu_probe, clock
        self.source = f"nvml@{getattr(gpu_probe, 'host', 'host')}"

    def check(self, previous: Reading | None = None) -> Reading:
        health = self.gpu_probe.check()
        status = {"ok": Status.ok, "degraded": Status.failing}.get(health.state, Status.unknown)
        summary = "; ".join(health.problems) if health.problems else health.message
        evidence = {
            "host": health.host,
            "state": health.state,
            "driver_version": health.driver_version,
            "gpus": len(health.gpus),
            "problems": list(health.problems),
            "xids": [[x.gpu, x.xid] for x in health.xid_events],
        }
        return Reading(self.signal, f"nvml@{health.host}", status, self.clock(), summary, evidence)


class EndpointHealthProbe:
    """The primary model server's own health endpoint, read from where this probe runs
    (serving: `endpoint_health`). Any answer but a 2xx within `timeout_s` is failing."""

    signal = "endpoint_health"

    def __init__(self, endpoint: Any, path: str, timeout_s: float, *, clock: Clock = utc_now):
        self.endpoint, self.path, self.timeout_s, self.clock = endpoint, path, timeout_s, clock
        self.source = f"health:{endpoint.url}{path}"
        self.target = endpoint.url

    def check(self, previous: Reading | None = None) -> Reading:
        answer = self.endpoint.get(self.path, timeout=self.timeout_s)
        evidence = {"status": answer.status, "latency_s": round(answer.latency_s, 3), "error": answer.error}
        if answer.ok:
            return Reading(
                self.signal, self.source, Status.ok, self.clock(), f"{self.source} answers", evidence
            )
        why = answer.error or f"HTTP {answer.status}"
        return Reading(
            self.signal, self.source, Status.failing, self.clock(), f"{self.source}: {why}", evidence
        )


class RouterHealthProbe:
    """The traffic router's own check of a site (serving: `router_health`): failing when it
    says the site is down; unknown when the router runs no check or does not answer."""

    signal = "router_health"

    def __init__(self, router: Any, site: str, *, name: str = "router", clock: Clock = utc_now):
        self.router, self.site, self.clock = router, site, clock
        self.source, self.target = f"{name}:{site}", None

    def check(self, previous: Reading | None = None) -> Reading:
        try:
            seen = self.router.health().get(self.site)
        except LifeboatError as e:
            return Reading(
                self.signal, self.source, Status.unknown, self.clock(), f"{self.source}: {e}", unreachable(e)
            )
        if seen is None or seen.state == "unknown":
            return Reading(
                self.signal, self.source, Status.unknown, self.clock(), f"{self.source}: no check runs"
            )
        status = Status.failing if seen.state == "down" else Status.ok
        evidence = {"state": seen.state, "detail": seen.detail, "weight": seen.weight}
        return Reading(
            self.signal,
            self.source,
            status,
            self.clock(),
            f"{self.source} {seen.state} ({seen.detail})",
            evidence,
        )
