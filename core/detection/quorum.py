"""The quorum: an outage is confirmed only when enough independent signals agree.

`decide(readings, now, policy, previous)` is a pure function. Rules, in the words of the
on-call who has been woken by a flaky control plane once too often:

- A *signal* (gpu_health, provider, ...) votes when the latest live reading of any of its
  sources is failing. Several sources of one signal (NVML and a DCGM alert) are one vote.
- A reading is live for `window` after it was taken, or until its `expires` (a firing alert
  stays true until resolved). Votes therefore agree within the window.
- A signal whose status changed `flap_changes` times within `flap_window` is flapping: it
  is shown in the evidence but never votes, so one flapping signal never fails over.
- Votes must come from independent *sources*: each counted vote needs an origin of its own
  (`Reading.independent_source`: the probe, or the whole Alertmanager group that carried
  the alert). Two signals claimed by one alert group are one vote: one group never
  confirms alone. Several origins per signal are matched so that as many votes as
  possible count (`independent_votes`).
- A target that did not answer (a store, an API endpoint) is one origin
  (`unreachable:<target>`): heartbeat, checkpoint listing and a store ping that all time out
  on one primary store are one vote, and each of their evidence lines names the signals that
  shared it. Answers that came back (a stale heartbeat, an old checkpoint) count per signal.
- `quorum` independent votes confirm. Once confirmed, the outage stays confirmed until no
  signal has failed for `recover_after` (hysteresis): a failover is not called off by one good ping.
- A probe run from several vantage points (`lifeboat_dr.core.detection.vantage`) is folded first:
  "unreachable" votes only when `vantages` (2) independent vantage points each timed out.
- Every decision carries the readings it was made from.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from lifeboat_dr.core.detection.signals import Reading, Status, iso, parse_time
from lifeboat_dr.core.detection.vantage import VANTAGES_NEEDED, across_vantages
from lifeboat_dr.kernel.durations import format_duration


class OutageState(StrEnum):
    healthy = "healthy"
    suspected = "suspected"  # at least one signal fails, fewer than the quorum
    confirmed = "confirmed"


@dataclass(frozen=True)
class QuorumPolicy:
    signals: tuple[str, ...]  # the runbook's detection.signals: only these vote
    quorum: int = 2
    window: timedelta = timedelta(minutes=5)
    flap_changes: int = 4
    flap_window: timedelta | None = None  # default: 3 x window
    recover_after: timedelta | None = None  # default: window
    vantages: int = VANTAGES_NEEDED  # vantage points that must all fail to reach a target to vote

    @property
    def flap_span(self) -> timedelta:
        return self.flap_window or 3 * self.window

    @property
    def recovery(self) -> timedelta:
        return self.recover_after if self.recover_after is not None else self.window

    @property
    def memory(self) -> timedelta:
        """How far back readings matter; older ones may be forgotten."""
        return max(self.window, self.flap_span, self.recovery) * 2

    @classmethod
    def from_detection(cls, detection: Any) -> QuorumPolicy:
        """From a `lifeboat_dr.runbooks.model.Detection`."""
        return cls(
            signals=tuple(str(getattr(s, "value", s)) for s in detection.signals),
            quorum=detection.quorum,
            window=detection.window,
        )


@dataclass(frozen=True)
class OutageDecision:
    state: OutageState
    previous: OutageState
    at: datetime
    quorum: int
    voting: tuple[str, ...]  # signals that say "outage" now
    evidence: tuple[Reading, ...]  # the failing readings behind every vote
    ignored: tuple[tuple[str, str], ...] = ()  # (signal, why it did not vote)
    outage_started_at: datetime | None = None  # earliest failure of this episode
    last_failing_at: datetime | None = None  # last time any signal voted (for hysteresis)
    summary: str = ""
    episode: int = 0  # how many times this runbook's outage has been confirmed
    independent: int = 0  # votes that each have a source of their own: what the quorum counts
    sources: tuple[str, ...] = ()  # the distinct sources behind the votes

    @property
    def changed(self) -> bool:
        return self.state is not self.previous

    def episode_id(self, runbook: str) -> uuid.UUID:
        """Stable id of this outage episode: the same confirmation emitted twice is one event."""
        moment = iso(self.outage_started_at or self.at)
        return uuid.uuid5(uuid.NAMESPACE_URL, f"lifeboat:{runbook}:{self.state}:{self.episode}:{moment}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "previous": self.previous.value,
            "at": iso(self.at),
            "quorum": self.quorum,
            "voting": list(self.voting),
            "evidence": [r.to_dict() for r in self.evidence],
            "ignored": [list(i) for i in self.ignored],
            "outage_started_at": iso(self.outage_started_at),
            "last_failing_at": iso(self.last_failing_at),
            "summary": self.summary,
            "episode": self.episode,
            "independent": self.independent,
            "sources": list(self.sources),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutageDecision:
        return cls(
            state=OutageState(d["state"]),
            previous=OutageState(d["previous"]),
            at=parse_time(d["at"]),
            quorum=d["quorum"],
            voting=tuple(d["voting"]),
            evidence=tuple(Reading.from_dict(r) for r in d["evidence"]),
            ignored=tuple(tuple(i) for i in d["ignored"]),
            outage_started_at=parse_time(d.get("outage_started_at")),
            last_failing_at=parse_time(d.get("last_failing_at")),
            summary=d.get("summary", ""),
            episode=d.get("episode", 0),
            independent=d.get("independent", len(d["voting"])),
            sources=tuple(d.get("sources", ())),
        )


def is_live(r: Reading, now: datetime, window: timedelta) -> bool:
    if r.at > now:
        return False
    return now < r.expires if r.expires is not None else now - r.at <= window


def _changes(readings: list[Reading], since: datetime) -> int:
    """Status changes of one source since `since` (unknown readings do not count)."""
    known = [r.status for r in readings if r.status is not Status.unknown and r.at >= since]
    return sum(a is not b for a, b in zip(known, known[1:], strict=False))


def _since(r: Reading) -> datetime:
    return parse_time(r.evidence.get("since")) or r.at


def independent_votes(origins: dict[str, set[str]]) -> int:
    """The most signals that can each be given a distinct source (bipartite matching:
    signals a, b both seen only by group G and c seen by G and H count 2, not 3)."""
    owner: dict[str, str] = {}  # source -> the signal it is counted for

    def place(signal: str, tried: set[str]) -> bool:
        for source in sorted(origins[signal]):
            if source in tried:
                continue
            tried.add(source)
            if source not in owner or place(owner[source], tried):
                owner[source] = signal
                return True
        return False

    return sum(place(signal, set()) for signal in sorted(origins))


UNREACHABLE = "unreachable:"


def shared_targets(origins: dict[str, set[str]]) -> dict[str, list[str]]:
    """Unreachable targets that more than one voting signal failed to reach -> those signals."""
    by_origin: dict[str, set[str]] = defaultdict(set)
    for signal, sources in origins.items():
        for source in sources:
            if source.startswith(UNREACHABLE):
                by_origin[source].add(signal)
    return {o: sorted(s) for o, s in sorted(by_origin.items()) if len(s) > 1}


def _with_sharers(r: Reading, shared: dict[str, list[str]]) -> Reading:
    """`r` with the other signals that could not reach its target, in its evidence line."""
    signals = shared.get(r.independent_source)
    if not signals:
        return r
    others = [s for s in signals if s != r.signal]
    target = r.independent_source.removeprefix(UNREACHABLE)
    return dataclasses.replace(
        r,
        summary=f"{r.summary}; {target} also unreachable for {', '.join(others)}: one vote",
        evidence={**r.evidence, "shared_with": others},
    )


def decide(
    readings: Iterable[Reading], now: datetime, policy: QuorumPolicy, previous: OutageDecision | None = None
) -> OutageDecision:
    by_signal: dict[str, dict[str, list[Reading]]] = defaultdict(lambda: defaultdict(list))
    readings = across_vantages(readings, now, policy.window, need=policy.vantages)
    for r in sorted(readings, key=lambda r: (r.at, r.source)):
        if r.at <= now:
            by_signal[r.signal][r.source].append(r)

    voting: list[str] = []
    origins: dict[str, set[str]] = {}
    evidence: list[Reading] = []
    ignored: list[tuple[str, str]] = []
    for signal in sorted(by_signal):
        sources = by_signal[signal]
        failing = [
            rs[-1] for rs in sources.values() if rs[-1].failing and is_live(rs[-1], now, policy.window)
        ]
        if not failing:
            continue
        if signal not in policy.signals:
            ignored.append((signal, "not one of this runbook's detection signals"))
            continue
        flaps = max(_changes(rs, now - policy.flap_span) for rs in sources.values())
        if flaps >= policy.flap_changes:
            ignored.append((signal, f"flapping: {flaps} changes in {format_duration(policy.flap_span)}"))
            evidence.extend(failing)
            continue
        voting.append(signal)
        origins[signal] = {r.independent_source for r in failing}
        evidence.extend(failing)

    independent = independent_votes(origins)
    shared = shared_targets(origins)
    evidence = [_with_sharers(r, shared) for r in evidence]
    before = previous.state if previous else OutageState.healthy
    last_failing = now if voting else (previous.last_failing_at if previous else None)
    if independent >= policy.quorum:
        state = OutageState.confirmed
    elif before is OutageState.confirmed and last_failing and now - last_failing < policy.recovery:
        state = OutageState.confirmed  # hysteresis: hold until quiet for recover_after
    elif voting:
        state = OutageState.suspected
    else:
        state = OutageState.healthy

    episode = previous.episode if previous else 0
    if state is OutageState.confirmed and before is not OutageState.confirmed:
        episode += 1
    started = None
    if state is not OutageState.healthy:
        candidates = [_since(r) for r in evidence]
        if previous and before is not OutageState.healthy and previous.outage_started_at:
            candidates.append(previous.outage_started_at)
        started = min(candidates) if candidates else None

    if state is OutageState.confirmed and independent < policy.quorum:
        summary = (
            f"confirmed (holding): {len(voting)} signal(s) still failing; recovers after "
            f"{format_duration(policy.recovery)} without failures"
        )
    elif state is OutageState.healthy:
        summary = "healthy: no signal failing" + (f" ({len(ignored)} ignored)" if ignored else "")
    elif independent < len(voting):
        summary = (
            f"{state}: {len(voting)} signal(s) fail ({', '.join(voting)}) but from {independent} "
            f"independent source(s); {independent} of {policy.quorum} count"
        )
    else:
        summary = f"{state}: {len(voting)} of {policy.quorum} signal(s) agree ({', '.join(voting)})"
    if shared and state is not OutageState.healthy:
        summary += "; one vote per unreachable target: " + "; ".join(
            f"{origin.removeprefix(UNREACHABLE)} ({', '.join(signals)})" for origin, signals in shared.items()
        )
    return OutageDecision(
        state=state,
        previous=before,
        at=now,
        quorum=policy.quorum,
        voting=tuple(voting),
        evidence=tuple(evidence),
        ignored=tuple(ignored),
        outage_started_at=started,
        last_failing_at=last_failing,
        summary=summary,
        episode=episode,
        independent=independent,
        sources=tuple(sorted(set().union(*origins.values()))),
    )
