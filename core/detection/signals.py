"""Signal readings: what one observer saw, when, and why it thinks so.

A reading is the unit of evidence. Probes produce them, the Alertmanager receiver produces
them, the quorum consumes them, and every decision carries the ones it was made from.
Everything here is plain data with a JSON round trip; time is always timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from lifeboat_dr.kernel.errors import ProviderUnavailable

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(text: str | datetime | None) -> datetime | None:
    if text is None or isinstance(text, datetime):
        return text
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class Status(StrEnum):
    ok = "ok"
    failing = "failing"
    unknown = "unknown"  # the observer could not look (no driver, store unreachable): no vote


@dataclass(frozen=True)
class Reading:
    """One observation of one signal by one source."""

    signal: str  # a lifeboat_dr.runbooks.model.Signal value: gpu_health, training_progress, ...
    source: str  # who looked: "nvml@host", "heartbeat:<uri>", "alertmanager:<fingerprint>"
    status: Status
    at: datetime  # when it was observed
    summary: str  # one line for the on-call
    evidence: dict[str, Any] = field(default_factory=dict)  # JSON-safe details
    # Until when the observation stays true without a new one. None: the quorum window.
    # A firing alert stays true until Alertmanager resolves it (or this time passes).
    expires: datetime | None = None
    # Who could have produced this reading, for independence: readings sharing an origin are
    # one source to the quorum however many signals they claim (an Alertmanager group, a
    # webhook endpoint). "" means the source itself, or for a target that did not answer,
    # that target (see `independent_source`).
    origin: str = ""

    @property
    def failing(self) -> bool:
        return self.status is Status.failing

    @property
    def independent_source(self) -> str:
        """What the quorum counts once: the origin; else, when the observer could not reach
        its target, `unreachable:<target>` (one endpoint that stopped answering is one fact,
        however many signals read it); else the source itself."""
        if self.origin:
            return self.origin
        target = self.evidence.get("target")
        if self.evidence.get("unreachable") is True and isinstance(target, str) and target:
            return f"unreachable:{target}"
        return self.source

    def to_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "source": self.source,
            "status": self.status.value,
            "at": iso(self.at),
            "summary": self.summary,
            "evidence": self.evidence,
            "expires": iso(self.expires),
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reading:
        return cls(
            signal=d["signal"],
            source=d["source"],
            status=Status(d["status"]),
            at=parse_time(d["at"]),
            summary=d.get("summary", ""),
            evidence=d.get("evidence") or {},
            expires=parse_time(d.get("expires")),
            origin=d.get("origin") or "",
        )


def unreachable(error: BaseException, target: str | None = None) -> dict[str, Any]:
    """Evidence of a reading whose source could not be reached (a store or API call that
    timed out or was refused: `ProviderUnavailable`): `{"unreachable": True, "error": ...,
    "target": target}`. Other errors (a bad answer) give `{}`. `lifeboat_dr.core.detection.vantage`
    counts these, once per target."""
    if isinstance(error, ProviderUnavailable):
        found = {"unreachable": True, "error": str(error)[:300]}
        return {**found, "target": target} if target else found
    return {}
