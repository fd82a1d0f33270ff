"""The signal log: readings and the last decision of one runbook, shared on this host.

The scheduled watch flow and the Alertmanager receiver both observe the same runbook:
each appends its readings and re-decides under an exclusive file lock, so a transition
to `confirmed` is seen, and emitted, by exactly one of them. One JSON-lines file per
runbook under `LIFEBOAT_STATE_DIR` (default `.lifeboat/detect`): each observation appends
its readings and the decision, a few hundred bytes, instead of rewriting the file; once the
file has grown to twice what was kept, it is compacted (rewritten atomically with what is
kept). What is kept is bounded (`bounded`): readings older than the policy's memory are
dropped (the newest per source is kept), at most `PER_ORIGIN` per origin and `MAX_ORIGINS`
origins per runbook (live failing ones first, then the newest), each reading at most
`MAX_READING` bytes, and a stored decision keeps a few of its readings — so an alert storm of thousands of groups leaves a small log.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Clock, Reading, utc_now
from lifeboat_dr.kernel.text import one_line

MAX_ORIGINS = 128  # origins a runbook's log keeps (an Alertmanager group is one)
PER_ORIGIN = 8  # readings kept per origin: its newest ones
MAX_READING = 4096  # bytes of one stored reading; a bigger one keeps its verdict, not its evidence
EVIDENCE_KEPT = 8  # readings a stored decision keeps as its evidence
MIN_COMPACT = 64 * 1024  # a log smaller than this is never compacted


def default_state_dir() -> Path:
    return Path(os.environ.get("LIFEBOAT_STATE_DIR", ".lifeboat/detect"))


def bounded(readings: Iterable[Reading], now: datetime, policy: QuorumPolicy) -> list[Reading]:
    """What a log keeps of `readings` at `now`: recent ones (and each source's newest, and
    live ones), at most `PER_ORIGIN` per origin and `MAX_ORIGINS` origins, each trimmed to
    `MAX_READING` bytes; sorted by time."""
    readings = list(readings)
    newest: dict[str, Reading] = {}
    for r in readings:
        if r.source not in newest or r.at >= newest[r.source].at:
            newest[r.source] = r
    cutoff = now - policy.memory
    keep = {id(r) for r in newest.values()}
    recent = [r for r in readings if r.at >= cutoff or id(r) in keep or (r.expires and r.expires > now)]
    by_origin: dict[str, list[Reading]] = defaultdict(list)
    for r in recent:
        by_origin[r.independent_source].append(r)
    for origin, rs in by_origin.items():
        by_origin[origin] = sorted(rs, key=lambda r: r.at)[-PER_ORIGIN:]

    def rank(rs: list[Reading]):  # live failing origins first (the quorum counts them), then the newest
        live = any(r.failing and (r.at >= now - policy.window or (r.expires and r.expires > now)) for r in rs)
        return (live, rs[-1].at)

    kept = sorted(by_origin.values(), key=rank, reverse=True)[:MAX_ORIGINS]
    return sorted((r for rs in kept for r in rs), key=lambda r: (r.at, r.source))


def trimmed(r: Reading) -> Reading:
    """`r`, or when its JSON is over `MAX_READING` bytes, its verdict without its evidence."""
    if len(json.dumps(r.to_dict())) <= MAX_READING:
        return r
    return replace(
        r,
        source=one_line(r.source, 200),
        summary=one_line(r.summary, 300),
        evidence={"trimmed": "the evidence was over the signal log's limit"},
        origin=one_line(r.origin, 200),
    )


class SignalLog:
    def __init__(self, runbook: str, directory: str | Path | None = None, *, clock: Clock = utc_now):
        self.runbook = runbook
        self.dir = Path(directory) if directory else default_state_dir()
        self.path = self.dir / f"{runbook}.jsonl"
        self.clock = clock

    def _load(self) -> tuple[list[Reading], OutageDecision | None]:
        readings, decision, _ = self._read()
        return readings, decision

    def _read(self) -> tuple[list[Reading], OutageDecision | None, int]:
        """Every reading in the file, the last decision, and the size of its last compaction."""
        readings, decision, compacted = [], None, 0
        try:
            with open(self.path, "rb") as f:
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # a write cut short by a crash: the next compaction drops it
                    record = json.loads(line)
                    if "reading" in record:
                        readings.append(Reading.from_dict(record["reading"]))
                    elif "decision" in record:
                        decision = OutageDecision.from_dict(record["decision"])
                    elif "compacted" in record:
                        compacted = int(record["compacted"])
        except FileNotFoundError:
            return (*self._read_legacy(), 0)
        return readings, decision, compacted

    def _read_legacy(self) -> tuple[list[Reading], OutageDecision | None]:
        """The one-document log of before (`<runbook>.json`), until the first compaction."""
        try:
            doc = json.loads(self.path.with_suffix(".json").read_text())
        except FileNotFoundError:
            return [], None
        decision = OutageDecision.from_dict(doc["decision"]) if doc.get("decision") else None
        return [Reading.from_dict(r) for r in doc.get("readings", [])], decision

    def kept(self, policy: QuorumPolicy) -> list[Reading]:
        """The readings this log counts now (`bounded`): what a compaction would keep."""
        readings, _ = self._load()
        return bounded(readings, self.clock(), policy)

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
        new = [trimmed(r) for r in new]
        with self._locked():
            readings, previous, compacted = self._read()
            now = self.clock()
            readings = bounded([*readings, *new], now, policy)  # the same, compacted or not
            decision = decide(readings, now, policy, previous)
            self._append(new, decision, readings, compacted)
            return decision

    def stand_down(self, reason: str) -> OutageDecision | None:
        """The pending failover was called off (its alerts resolved before anyone approved):
        leave `confirmed` now instead of holding, so a renewed quorum fails over again."""
        with self._locked():
            _, previous = self._load()
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
            self._write_lines(self._lines([], decision), mode="ab")
            return decision

    @staticmethod
    def _lines(readings: Iterable[Reading], decision: OutageDecision) -> bytes:
        out = [json.dumps({"reading": r.to_dict()}, sort_keys=True) for r in readings]
        # the next decision needs the state, the episode and the times, not every reading behind
        # it (the outage event carries those): a few, so one line stays small in a storm
        kept = replace(decision, evidence=decision.evidence[:EVIDENCE_KEPT])
        out.append(json.dumps({"decision": kept.to_dict()}, sort_keys=True))
        return ("\n".join(out) + "\n").encode()

    def _append(self, new: list[Reading], decision, kept: list[Reading], compacted: int) -> None:
        """Append `new` and `decision`; compact instead (`kept`, written in one atomic replace)
        once the log has doubled since its last compaction, or when there is none yet."""
        size = self.path.stat().st_size if self.path.exists() else 0
        added = self._lines(new, decision)
        if size and size + len(added) < max(MIN_COMPACT, 2 * compacted):
            self._write_lines(added, mode="ab")
            return
        data = self._lines(kept, decision)
        data = (json.dumps({"compacted": len(data)}) + "\n").encode() + data
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(self.path)
        self.path.with_suffix(".json").unlink(missing_ok=True)  # the log of before, now carried over

    def _write_lines(self, data: bytes, mode: str) -> None:
        with open(self.path, mode) as f:
            f.write(data)
