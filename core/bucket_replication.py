"""Replication the bucket does itself (S3 Cross-Region Replication, a GCS dual-region
bucket), as an input to RPO.

A runbook with `replication: s3-crr` says a bucket rule copies the primary's store to the
secondary's; Lifeboat then copies nothing that way and trusts only what the bucket says it
finished. S3 reports it per object, and only on HEAD or GET (`x-amz-replication-status`;
ListObjectsV2, GetObjectAttributes and the S3 Inventory's hourly-to-daily reports aside):
PENDING, COMPLETED or FAILED on the source, REPLICA on the destination.

- Certification HEADs every object of the checkpoint it judges on the replica (the primary
  may be down) and counts an object only when the replica says REPLICA; the same HEAD gives
  its CRC32C, so with the source down this costs nothing over a replica without a receipt,
  and with it up, one HEAD per object where a plain-MD5 ETag match needed none. RPO is then
  the newest checkpoint whose every object the bucket reports replicated (older checkpoints
  are judged only when a newer one is rejected).
- The `replicate` pass HEADs the source's objects of each committed checkpoint not yet seen
  complete: COMPLETED everywhere is a replica done (its lag recorded as observed: a replica
  keeps its source's Last-Modified, so when it landed is not reported, only that it had by
  now), PENDING is a lag still growing, FAILED is a failure (S3 never retries it: the object
  must be written again or sent by S3 Batch Replication).

The rule replicates primary to secondary only: after a failover the way back is Lifeboat's
copy, as without a rule. The rule must not cover `_lifeboat/` (the site state): a filter by
the checkpoints' prefix; a replicated lease would put the primary's record over a fence.

`replication: gcs-dual-region`: both sites name one dual-region (or multi-region) bucket,
which reports no status per object, only its `rpo` setting: DEFAULT (Google: 99.9% of
objects within 1 hour, 100% within 12 hours) or ASYNC_TURBO (100% within 15 minutes).
Certification counts an object only once the store's own clock (the Date of the answer
that gave the rpo, never this host's clock) is past its `updated` (GCS: never before its
`timeCreated`) plus the 100% bound; a checkpoint younger than that is "replicating", with the
time until it will be, never certified. An rpo the bucket does not report (a regional
bucket, an unknown value) or a read that is not answered is never complete. One bucket GET
per certification; the listing already has every object's `updated`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.replication.lag import LagLog, LagRecord
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

if TYPE_CHECKING:  # certification imports this module, and needs none of the copy's
    from lifeboat_dr.core.replication.copying import ReplicationReport

LIFEBOAT, S3_CRR, GCS_DUAL_REGION = "lifeboat", "s3-crr", "gcs-dual-region"
MODES = (LIFEBOAT, S3_CRR, GCS_DUAL_REGION)
# the time within which a dual-region bucket has replicated every object, by its rpo setting
RPO_BOUNDS = {"ASYNC_TURBO": timedelta(minutes=15), "DEFAULT": timedelta(hours=12)}
REPLICA, COMPLETED, PENDING, FAILED = "REPLICA", "COMPLETED", "PENDING", "FAILED"


def not_vouched(info: ObjectInfo) -> str | None:
    """Why the destination bucket does not vouch for this replica object (from its HEAD);
    None when it reports it a replica."""
    if info.replication == REPLICA:
        return None
    said = info.replication or "no replication status"
    return f"the bucket reports {said} for {info.key}, not REPLICA: not a replica its rule finished"


def source_says(source: Store, key: str) -> str:
    """What the source bucket says of an object missing on the replica, for the rejection's
    detail: `(source: PENDING)`, or empty when it says nothing useful."""
    try:
        status = source.head(key).replication
    except NotFound:
        return ""
    return f" (source: {status})" if status else ""


def observe_replication(
    source: Store,
    checkpoints: Iterable[StoredCheckpoint],
    *,
    rpo_target: timedelta,
    now: datetime,
    recorded: set[str],
) -> tuple[list[LagRecord], dict[str, str]]:
    """The bucket's progress on each committed checkpoint of `source` not in `recorded` (the
    prefixes already logged complete): a lag record each, complete when every object is
    COMPLETED, and the failures by prefix (an object the bucket reports FAILED). One HEAD per
    object of each checkpoint looked at."""
    lags: list[LagRecord] = []
    failed: dict[str, str] = {}
    for ckpt in checkpoints:
        prefix = ckpt.prefix.strip("/")
        if prefix in recorded:
            continue
        heads = [source.head(info.key) for info in source.list(prefix + "/")]
        if not heads:
            continue
        statuses = {h.key: h.replication for h in heads}
        written = max(h.updated for h in heads)
        bad = sorted(k for k, s in statuses.items() if s == FAILED)
        unruled = sorted(k for k, s in statuses.items() if s is None)
        if bad:
            failed[prefix] = (
                f"the bucket reports FAILED for {len(bad)} object(s), first {bad[0]} "
                "(S3 does not retry: write it again or use S3 Batch Replication)"
            )
        elif unruled:
            failed[prefix] = (
                f"the bucket reports no replication status for {len(unruled)} object(s), first "
                f"{unruled[0]}: no replication rule covers them"
            )
        complete = all(s == COMPLETED for s in statuses.values())
        lags.append(LagRecord(prefix, ckpt.step, written, now, rpo_target, complete=complete))
    return lags, failed


def bucket_pass(
    source: Store,
    checkpoints: Iterable[StoredCheckpoint],
    *,
    rpo_target: timedelta,
    lag_log: LagLog,
    now: datetime,
    dry_run: bool = False,
) -> ReplicationReport:
    """A `replicate` pass where the bucket copies: nothing written, the bucket's progress on
    each checkpoint not yet logged complete in `lag_log` as the report's lags and failures
    (the caller appends the lags, as after a copy)."""
    from lifeboat_dr.core.replication.copying import ReplicationReport

    recorded = {r.checkpoint for r in lag_log.read() if r.complete}
    lags, failed = observe_replication(source, checkpoints, rpo_target=rpo_target, now=now, recorded=recorded)
    return ReplicationReport(lags=lags, failed=failed, dry_run=dry_run)


@dataclass(frozen=True)
class ReplicationBound:
    """What a dual-region bucket vouches for: every object older than `bound` by the
    store's clock `at` has replicated. `bound` None: nothing is vouched for (`why`)."""

    bound: timedelta | None
    at: datetime | None  # the store's clock, from the same answer
    why: str  # the rpo and its bound, or why there is none

    def replicating(self, newest: datetime, key: str) -> tuple[str, timedelta | None] | None:
        """None when an object written at `newest` (the checkpoint's youngest, `key`) is past
        the bound; else why not, and how long until it will be (None: never, as known now)."""
        if self.bound is None or self.at is None:
            return f"not known replicated: {self.why}", None
        ready = newest + self.bound
        if self.at > ready:
            return None
        wait = ready - self.at
        return (
            f"replicating: {key} was written {newest.isoformat()}, {format_duration(max(self.at - newest, timedelta(0)))} "
            f"before the store's clock ({self.at.isoformat()}); {self.why}: complete in "
            f"{format_duration(wait)} ({ready.isoformat()})"
        ), wait


def read_bound(store: Store) -> ReplicationBound:
    """The bucket's replication bound, by one bucket GET (`store.bucket_rpo()`, GCS); a store
    that cannot say, an rpo without a known bound, or no answer: no bound."""
    ask = getattr(store, "bucket_rpo", None)
    if ask is None:
        return ReplicationBound(None, None, f"{store.uri} reports no bucket rpo")
    try:
        said = ask()
    except (ProviderUnavailable, NotFound, ConfigError) as e:
        line = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        return ReplicationBound(None, None, f"the bucket's rpo could not be read ({line})")
    bound = RPO_BOUNDS.get(said.rpo or "")
    if bound is None:
        return ReplicationBound(
            None,
            said.at,
            f"the bucket reports rpo {said.rpo or 'none'} (location type {said.location_type or 'unknown'}), "
            f"which bounds no replication: not a dual-region bucket with {' or '.join(RPO_BOUNDS)}",
        )
    return ReplicationBound(
        bound, said.at, f"the bucket's rpo {said.rpo} replicates every object within {format_duration(bound)}"
    )
