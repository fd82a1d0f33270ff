"""The signal log: readings and the last decision of one runbook, shared on this host.

The scheduled watch flow and the Alertmanager receiver both observe the same runbook:
each appends its readings and re-decides under an exclusive file lock, so a transition
to `confirmed` is seen, and emitted, by exactly one of them. One small JSON file per
runbook under `LIFEBOAT_STATE_DIR` (default `.lifeboat/detect`), rewritten atomically;
readings older than the policy's memory are dropped (the newest per source is kept).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Clock, Reading, utc_now


def default_state_dir() -> Path:
    return Path(os.environ.get("LIFEBOAT_STATE_DIR", ".lifeboat/detect"))


class SignalLog:
    def __init__(self, runbook: str, directory: str | Path | None = None, *, clock: Clock = utc_now):
        self.runbook = runbook
        self.dir = Path(directory) if directory else default_state_dir()
        self.path = self.dir / f"{runbook}.json"
        self.clock = clock

    def _load(self) -> tuple[list[Reading], OutageDecision | None]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return [], None
        decision = OutageDecision.from_dict(doc["decision"]) if doc.get("decision") else None
        return [Reading.from_dict(r) for r in doc.get("readings", [])], decision

    @contextmanager
    def _locked(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f"{self.runbook}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def latest(self, source: str) -> Reading | None:
        """This source's newest reading: probes use it to remember across runs."""
        readings, _ = self._load()
        mine = [r for r in readings if r.source == source]
        return max(mine, key=lambda r: r.at) if mine else None

    def observe(self, new: Iterable[Reading], policy: QuorumPolicy) -> OutageDecision:
        """Record `new` readings and decide again; returns the decision (see `.changed`)."""
        with self._locked():
            readings, previous = self._load()
            readings.extend(new)
            now = self.clock()
            decision = decide(readings, now, policy, previous)
            self._save(self._forget(readings, now, policy), decision)
            return decision

    def stand_down(self, reason: str) -> OutageDecision | None:
        """The pending failover was called off (its alerts resolved before anyone approved):
        leave `confirmed` now instead of holding, so a renewed quorum fails over again."""
        with self._locked():
            readings, previous = self._load()
            if previous is None or previous.state is not OutageState.confirmed:
                return previous
            state = OutageState.suspected if previous.voting else OutageState.healthy
            decision = replace(
                previous,
                state=state,
                previous=previous.state,
                at=self.clock(),
                summary=f"stood down: {reason}",
            )
            self._save(readings, decision)
            return decision

    @staticmethod
    def _forget(readings: list[Reading], now, policy: QuorumPolicy) -> list[Reading]:
        newest: dict[str, Reading] = {}
        for r in readings:
            if r.source not in newest or r.at >= newest[r.source].at:
                newest[r.source] = r
        cutoff = now - policy.memory
        keep = {id(r) for r in newest.values()}
        return sorted(
            (r for r in readings if r.at >= cutoff or id(r) in keep or (r.expires and r.expires > now)),
            key=lambda r: (r.at, r.source),
        )

    def _save(self, readings: list[Reading], decision: OutageDecision) -> None:
        doc = {"readings": [r.to_dict() for r in readings], "decision": decision.to_dict()}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        tmp.replace(self.path)
