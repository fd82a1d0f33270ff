"""A bucket that replicates itself (S3 Cross-Region Replication, `replication: s3-crr`):
certification counts only what the bucket reports it finished, so the RPO is the newest
checkpoint the bucket finished. The bucket is the fake beside the memory store
(`testing/bucket_replication.py`): moto replicates nothing (test_bucket_replication_s3.py)."""

from datetime import timedelta

from lifeboat_dr.core.bucket_replication import observe_replication
from lifeboat_dr.core.certify import MISSING, NOT_REPLICATED, certify_replica
from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.bucket_replication import crr_pair

LAST_SHARD = "step_0000300/shard-000003.bin"


def _train(primary, clock, steps=(100, 200, 300)):
    """The job writes a manifest checkpoint every 10 minutes."""
    written = {}
    for step in steps:
        clock.advance(minutes=10)
        write_checkpoint(primary, "manifest", step, created=clock.now)
        written[step] = clock.now
    return written


def test_the_region_goes_down_before_the_bucket_finished_the_newest_checkpoint(clock):
    # CRR lands each object 30 s after its write; step 300's last shard is large and takes 5 min
    primary, secondary, _ = crr_pair(
        clock, lag_for=lambda key: timedelta(minutes=5) if key == LAST_SHARD else None
    )
    written = _train(primary, clock)
    clock.advance(minutes=1)  # the rest of step 300 has landed, its last shard has not
    primary.outage = True  # the primary region is down: replication stops with it
    clock.advance(minutes=10)

    report = certify_replica(
        secondary, primary, layout="manifest", at=clock.now, source_down="region down", replicated_by="s3-crr"
    )

    assert report.certified.step == 200
    assert report.rpo == clock.now - written[200]
    (rejected,) = report.rejected
    assert (rejected.step, rejected.reason, rejected.detail) == (300, MISSING, f"missing shard {LAST_SHARD}")


def test_an_object_the_bucket_did_not_write_is_not_counted_even_with_equal_bytes(clock):
    primary, secondary, _ = crr_pair(clock, fails=lambda key: key == LAST_SHARD)  # e.g. a KMS key refused
    _train(primary, clock)
    clock.advance(minutes=1)
    # someone copies the failed shard by hand: the same bytes, but no replica of the bucket's
    secondary.put(LAST_SHARD, primary.peek(LAST_SHARD))

    crr = certify_replica(secondary, primary, layout="manifest", at=clock.now, replicated_by="s3-crr")
    lifeboat = certify_replica(secondary, primary, layout="manifest", at=clock.now)

    assert crr.certified.step == 200
    (rejected,) = crr.rejected
    assert (rejected.step, rejected.reason) == (300, NOT_REPLICATED)
    assert rejected.detail == (
        f"the bucket reports no replication status for {LAST_SHARD}, not REPLICA: "
        "not a replica its rule finished"
    )
    assert lifeboat.certified.step == 300  # by checksums alone, as before (the default)


def test_a_shard_still_pending_is_named_with_what_the_source_says(clock):
    primary, secondary, _ = crr_pair(
        clock, lag_for=lambda key: timedelta(hours=1) if key == LAST_SHARD else None
    )
    _train(primary, clock)
    clock.advance(minutes=1)

    report = certify_replica(secondary, primary, layout="manifest", at=clock.now, replicated_by="s3-crr")

    assert report.certified.step == 200
    assert report.rejected[0].detail == f"missing shard {LAST_SHARD} (source: PENDING)"


def test_each_object_judged_costs_one_replica_head_and_none_without_the_rule(clock):
    primary, secondary, _ = crr_pair(clock)
    _train(primary, clock, steps=(100,))
    clock.advance(minutes=1)

    crr = certify_replica(secondary, primary, layout="manifest", at=clock.now, replicated_by="s3-crr")
    plain = certify_replica(secondary, primary, layout="manifest", at=clock.now)

    assert crr.certified.step == plain.certified.step == 100
    assert crr.calls["replica.head"] == 5  # its four shards and its manifest: one each
    assert "replica.head" not in plain.calls


def test_replicate_records_the_bucket_lag_and_reports_a_failed_object(clock):
    primary, secondary, _ = crr_pair(
        clock,
        fails=lambda key: key == LAST_SHARD,
        lag_for=lambda k: timedelta(hours=1) if "0200" in k else None,
    )
    written = _train(primary, clock)
    clock.advance(minutes=2)
    ckpts = [StoredCheckpoint(f"step_{s:07d}", s) for s in (300, 200, 100)]

    lags, failed = observe_replication(
        primary, ckpts, rpo_target=timedelta(minutes=30), now=clock.now, recorded={"step_0000100"}
    )

    assert [(r.step, r.complete, r.lag) for r in lags] == [
        (300, False, clock.now - written[300]),  # one shard FAILED
        (200, False, clock.now - written[200]),  # still PENDING: the lag so far, growing
    ]
    assert failed == {
        "step_0000300": f"the bucket reports FAILED for 1 object(s), first {LAST_SHARD} "
        "(S3 does not retry: write it again or use S3 Batch Replication)"
    }
    assert list(secondary.list("step_0000200/")) == []  # none of it has landed yet
