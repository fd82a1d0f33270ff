"""Detection state in an object store, so `watch`, `lifeboat serve` replicas and workers on
different hosts keep one signal log and one dedupe memory per runbook.

`LIFEBOAT_STATE_DIR` names where: a folder (the file-locked `SignalLog`, one host) or a store
URI (`s3://bucket/lifeboat/detect`, `gs://…`, `file:///shared/…`): then every change is a
read, a decision, and a conditional write (`if_match` the version read, `if_none_match` for
the first), retried when another writer got there first. A transition to `confirmed` is
still decided, and emitted, by exactly one writer. Put it where the primary's outage cannot
reach: the secondary site's bucket, or a third one (`lifeboat validate` warns otherwise).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

from lifeboat_dr.core.detection.log import SignalLog, bounded, trimmed
from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Clock, Reading, utc_now
from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable

WRITE_ATTEMPTS = 20  # racing writers per change before giving up


def is_store_uri(where: str | Path | None) -> bool:
    return isinstance(where, str) and urlparse(where).scheme in ("s3", "gs", "file")


def state_location(where: str | Path | None = None) -> str | Path:
    """`where`, else LIFEBOAT_STATE_DIR as written (a URI survives), else .lifeboat/detect."""
    if where is not None:
        return where
    return os.environ.get("LIFEBOAT_STATE_DIR") or ".lifeboat/detect"


def open_signal_log(runbook: str, where: str | Path | None = None, *, clock: Clock = utc_now):
    """The runbook's signal log at `where` (default LIFEBOAT_STATE_DIR): a `StoreSignalLog`
    for a store URI, else the host-local `SignalLog`."""
    where = state_location(where)
    if is_store_uri(where):
        from lifeboat_dr.providers.storage import open_store

        return StoreSignalLog(runbook, open_store(where), clock=clock)
    return SignalLog(runbook, where, clock=clock)


def open_seen(where: str | Path | None = None, *, clock: Clock = utc_now):
    """Alert dedupe memory shared through the store at `where` (a store URI), or None when
    `where` is a folder (the receiver then keeps its own, in memory)."""
    where = state_location(where)
    if not is_store_uri(where):
        return None
    from lifeboat_dr.providers.storage import open_store

    return StoreSeen(open_store(where), clock=clock)


class StoreSignalLog:
    """`SignalLog`'s interface over a `Store`: `<runbook>.json`, changed by conditional writes
    (an object cannot be appended to: it is rewritten, kept small by the same bounds)."""

    def __init__(self, runbook: str, store, *, clock: Clock = utc_now):
        self.runbook, self.store, self.clock = runbook, store, clock
        self.key = f"{runbook}.json"

    def _load(self) -> tuple[list[Reading], OutageDecision | None, str | None]:
        try:
            version = self.store.head(self.key).version
            doc = json.loads(b"".join(self.store.read(self.key)))
            decision = OutageDecision.from_dict(doc["decision"]) if doc.get("decision") else None
            return [Reading.from_dict(r) for r in doc.get("readings", [])], decision, version
        except NotFound:
            return [], None, None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(
                f"{self.store.uri}/{self.key}: not a signal log ({type(e).__name__}: {e})"
            ) from None

    def _change(
        self, change: Callable[[list[Reading], OutageDecision | None], tuple]
    ) -> OutageDecision | None:
        """Read, apply `change` (-> readings to keep, decision, or None to write nothing),
        write if nobody wrote since the read; else again."""
        for _ in range(WRITE_ATTEMPTS):
            readings, previous, version = self._load()
            out = change(readings, previous)
            if out is None:
                return previous
            keep, decision = out
            doc = {"readings": [r.to_dict() for r in keep], "decision": decision.to_dict()}
            data = json.dumps(doc, indent=1, sort_keys=True).encode()
            try:
                if version is None:
                    self.store.put(self.key, data, if_none_match=True)
                else:
                    self.store.put(self.key, data, if_match=version)
                return decision
            except PreconditionFailed:
                continue  # another watch or receiver wrote first: decide again on theirs
        raise ProviderUnavailable(f"{self.store.uri}/{self.key}: {WRITE_ATTEMPTS} writers raced")

    def latest(self, source: str) -> Reading | None:
        readings, _, _ = self._load()
        mine = [r for r in readings if r.source == source]
        return max(mine, key=lambda r: r.at) if mine else None

    def observe(self, new: Iterable[Reading], policy: QuorumPolicy) -> OutageDecision:
        new = [trimmed(r) for r in new]

        def change(readings, previous):
            readings = [*readings, *new]
            now = self.clock()
            decision = decide(readings, now, policy, previous)
            return bounded(readings, now, policy), decision

        return self._change(change)

    def stand_down(self, reason: str) -> OutageDecision | None:
        def change(readings, previous):
            if previous is None or previous.state is not OutageState.confirmed:
                return None
            state = OutageState.suspected if previous.voting else OutageState.healthy
            return readings, replace(
                previous,
                state=state,
                previous=previous.state,
                at=self.clock(),
                summary=f"stood down: {reason}",
            )

        return self._change(change)


class StoreSeen:
    """`Seen` shared by receivers: `first(key)` is True for exactly one caller per key and
    `ttl`, decided by a create-only write of `seen/<sha256(key)>` (an expired one is replaced
    only at the version read, so two receivers cannot both renew it)."""

    def __init__(self, store, ttl: timedelta = timedelta(hours=24), *, clock: Clock = utc_now):
        self.store, self.ttl, self.clock = store, ttl, clock

    def first(self, key: str) -> bool:
        name = f"seen/{hashlib.sha256(key.encode()).hexdigest()}"
        now = self.clock()
        stamp = json.dumps({"at": now.isoformat()}).encode()
        try:
            self.store.put(name, stamp, if_none_match=True)
            return True
        except PreconditionFailed:
            pass
        try:
            info = self.store.head(name)
            at = datetime.fromisoformat(json.loads(b"".join(self.store.read(name)))["at"])
        except NotFound:  # expired and removed meanwhile: whoever creates it next is first
            return self.first(key)
        except (ValueError, KeyError, TypeError):
            at = now - self.ttl - timedelta(seconds=1)  # unreadable: treat as expired
        if now - at <= self.ttl:
            return False
        try:
            self.store.put(name, stamp, if_match=info.version)
            return True
        except PreconditionFailed:
            return False
