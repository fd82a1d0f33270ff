"""S3 Cross-Region Replication where the test peers have none: a fake beside the memory store,
and the status header taught to moto.

moto 5.2 keeps a bucket's replication configuration (PutBucketReplication) but replicates
nothing and reports no `x-amz-replication-status` (tests/certify/test_bucket_replication_s3.py
holds the gap open). S3, as its user guide describes it: an object written under a rule is
PENDING on the source; once the replica has landed the source says COMPLETED and the replica
REPLICA; a permanent failure (permissions, KMS) is FAILED and never retried; a transient one
(a region down) stays PENDING.

- `CrrBucket` / `CrrRule`: two `MemoryStore` buckets and a rule with a lag by an injected
  clock: each object replicates `lag` after its write, unless the source or the destination
  is in an outage (it stays PENDING) or `fails(key)` (FAILED). HEAD reports the status.
- `moto_replicate`: on an in-process moto server, copy objects to the destination bucket
  and set the statuses moto's HEAD then answers, so the real `S3Store` reads the header over
  HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from lifeboat_dr.providers.storage.base import ObjectInfo
from lifeboat_dr.testing.memory_store import MemoryStore

PENDING, COMPLETED, FAILED, REPLICA = "PENDING", "COMPLETED", "FAILED", "REPLICA"


class CrrBucket(MemoryStore):
    """A memory bucket whose HEAD reports the replication status of each object."""

    def __init__(self, name: str, *, clock: Callable[[], datetime]):
        self.rule: CrrRule | None = None
        super().__init__(name, clock=clock)
        self.statuses: dict[str, str] = {}  # key -> PENDING | COMPLETED | FAILED | REPLICA

    @property
    def outage(self) -> bool:
        return self._outage

    @outage.setter
    def outage(self, down: bool) -> None:
        """What was due by now lands before the region goes down (the fake settles lazily)."""
        if down and getattr(self, "rule", None) is not None:
            self.rule.settle()
        self._outage = down

    def _settle(self) -> None:
        if self.rule is not None:
            self.rule.settle()

    def list(self, prefix: str = ""):
        self._settle()
        return super().list(prefix)

    def head(self, key: str) -> ObjectInfo:
        self._settle()
        return replace(super().head(key), replication=self.statuses.get(key))

    def read(self, key: str, start: int = 0, end: int | None = None):
        self._settle()
        return super().read(key, start, end)

    def put(self, key: str, data, **kwargs) -> ObjectInfo:
        self._settle()
        info = super().put(key, data, **kwargs)
        if self.rule is not None:
            self.rule.written(self, key, info.updated)
        return info

    def delete(self, key: str) -> None:
        super().delete(key)
        self.statuses.pop(key, None)


class CrrRule:
    """Replicate `source` objects under `prefix` to `destination`, each `lag` after its write
    (`lag_for(key)` overrides it per key: a large shard that lands last)."""

    def __init__(
        self,
        source: CrrBucket,
        destination: CrrBucket,
        *,
        clock: Callable[[], datetime],
        lag: timedelta = timedelta(seconds=30),
        prefix: str = "",
        lag_for: Callable[[str], timedelta | None] = lambda key: None,
        fails: Callable[[str], bool] = lambda key: False,
    ):
        self.source, self.destination, self.clock = source, destination, clock
        self.lag, self.prefix, self.lag_for, self.fails = lag, prefix, lag_for, fails
        self._due: dict[str, datetime] = {}  # source key -> when its replica lands
        self._lock = threading.RLock()
        source.rule = destination.rule = self

    def written(self, bucket: CrrBucket, key: str, when: datetime) -> None:
        with self._lock:
            if bucket is self.source and key.startswith(self.prefix):
                bucket.statuses[key] = PENDING  # a new version: replicated again
                self._due[key] = when + (self.lag_for(key) or self.lag)
            elif bucket is self.destination:
                bucket.statuses.pop(key, None)  # written by a client there: not a replica

    def settle(self) -> None:
        """Land every replica that is due, as of the clock; none while either end is down."""
        with self._lock:
            if self.source.outage or self.destination.outage:
                return  # transient: S3 leaves the objects PENDING and resumes later
            now = self.clock()
            for key in [k for k, due in self._due.items() if due <= now]:
                del self._due[key]
                if self.fails(key):
                    self.source.statuses[key] = FAILED
                    continue
                data = self.source.peek(key)
                if data is None:  # deleted before it replicated
                    continue
                MemoryStore.put(self.destination, key, data)  # the bucket's write, not a client's
                self.destination.statuses[key] = REPLICA
                self.source.statuses[key] = COMPLETED


def crr_pair(clock: Callable[[], datetime], **rule) -> tuple[CrrBucket, CrrBucket, CrrRule]:
    """(primary bucket, secondary bucket, the rule between them)."""
    source, destination = CrrBucket("primary", clock=clock), CrrBucket("secondary", clock=clock)
    return source, destination, CrrRule(source, destination, clock=clock, **rule)


def moto_replicate(source, destination, keys: Iterable[str], *, fail: Iterable[str] = ()) -> None:
    """What a CRR rule would have done on an in-process moto server, between two `S3Store`s:
    each key copied server-side and marked COMPLETED on the source, REPLICA on the replica;
    keys in `fail` are not copied and marked FAILED."""
    failing = set(fail)
    for key in keys:
        if key in failing:
            _set_status(source, key, FAILED)
            continue
        destination.server_copy(source, key, key)
        _set_status(source, key, COMPLETED)
        _set_status(destination, key, REPLICA)


def set_moto_status(store, key: str, status: str) -> None:
    """Make moto's HEAD of `key` answer `x-amz-replication-status: <status>`."""
    _set_status(store, key, status)


def _set_status(store, key: str, status: str) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    obj = backend.get_object(store.bucket, store._key(key))
    # moto answers a HEAD with the key's metadata as headers, this one included
    obj.metadata["x-amz-replication-status"] = status
