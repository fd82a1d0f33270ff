"""One GCS dual-region bucket for both sites (`replication: gcs-dual-region`): the bucket
reports no status per object, only its `rpo` setting, so certification counts an object
once the store's own clock is past its `updated` plus the setting's bound (ASYNC_TURBO 15
minutes, DEFAULT 12 hours), and RPO is the newest checkpoint every object of which is past
it. The bucket is the fake beside the memory store (`testing/gcs_dual_region.py`); neither
GCS peer reports an rpo (pinned at the end of this file, on fake-gcs-server through the
proxy that adds it)."""

from datetime import timedelta

import pytest

from lifeboat_dr.core.certify import NOT_REPLICATED, REPLICATING, certify_replica
from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.emulators import new_gcs_bucket
from lifeboat_dr.testing.gcs_dual_region import DEFAULT, TURBO, DualRegionBucket, RpoProxy

NEWEST = "step_0000300"


def _train(bucket, clock, steps=(100, 200, 300)):
    """The job writes a manifest checkpoint every 10 minutes."""
    written = {}
    for step in steps:
        clock.advance(minutes=10)
        write_checkpoint(bucket, "manifest", step, created=clock.now)
        written[step] = clock.now
    return written


def _certify(bucket, clock, **kw):
    """Both sites' store is the one bucket: replica, source and site state alike."""
    kw.setdefault("at", clock.now)
    return certify_replica(bucket, bucket, layout="manifest", replicated_by="gcs-dual-region", **kw)


def test_the_region_goes_down_six_minutes_after_the_newest_checkpoint(clock):
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    written = _train(bucket, clock)
    clock.advance(minutes=6)  # step 300 is 6 minutes old, step 200 16

    report = _certify(bucket, clock)

    assert report.certified.step == 200
    assert report.rpo == clock.now - written[200]
    (young,) = report.rejected
    assert (young.step, young.reason, young.ready_in_s) == (300, REPLICATING, 9 * 60)
    assert young.detail == (
        f"replicating: {NEWEST}/lifeboat-manifest.json was written {written[300].isoformat()}, 6m before the "
        f"store's clock ({clock.now.isoformat()}); the bucket's rpo ASYNC_TURBO replicates every object "
        f"within 15m: complete in 9m ({(written[300] + timedelta(minutes=15)).isoformat()})"
    )
    assert report.to_dict()["rejected"][0]["ready_in_s"] == 540.0


def test_after_the_bound_has_passed_the_newest_checkpoint_certifies(clock):
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    written = _train(bucket, clock)
    clock.advance(minutes=15)  # exactly the bound: not yet past it
    assert _certify(bucket, clock).certified.step == 200
    clock.advance(seconds=1)

    report = _certify(bucket, clock)

    assert (report.certified.step, report.rejected) == (300, [])
    assert report.rpo == timedelta(minutes=15, seconds=1) == clock.now - written[300]


def test_the_default_rpo_bounds_by_twelve_hours_not_the_first_hour(clock):
    # Google: 99.9% of objects within an hour, 100% within 12 hours: only the 100% bound is a promise
    bucket = DualRegionBucket(clock=clock, rpo=DEFAULT)
    _train(bucket, clock)
    clock.advance(hours=2)

    report = _certify(bucket, clock)

    assert report.certified is None
    assert [(r.step, r.reason) for r in report.rejected] == [
        (300, REPLICATING),
        (200, REPLICATING),
        (100, REPLICATING),
    ]
    assert report.rejected[0].ready_in_s == 10 * 3600
    clock.advance(hours=10, minutes=1)
    assert _certify(bucket, clock).certified.step == 300


def test_certifying_twice_reads_the_bucket_once_each_and_writes_nothing(clock):
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    _train(bucket, clock)
    clock.advance(minutes=6)
    before = {o.key: o.version for o in bucket.list()}

    first, second = _certify(bucket, clock), _certify(bucket, clock)

    assert (first.certified, first.rejected) == (second.certified, second.rejected)
    assert first.calls["replica.bucket_rpo"] == second.calls["replica.bucket_rpo"] == 1
    assert bucket.rpo_reads == 2
    assert {o.key: o.version for o in bucket.list()} == before  # certification wrote nothing


def test_a_control_plane_whose_clock_runs_a_day_ahead_certifies_nothing_younger(clock):
    # the host believes a day has passed; the store's clock (the bucket's answer) says 6 minutes
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    written = _train(bucket, clock)
    clock.advance(minutes=6)

    report = _certify(bucket, clock, at=clock.now + timedelta(days=1))

    assert report.certified.step == 200
    assert report.rejected[0].ready_in_s == 9 * 60
    assert report.rpo == timedelta(days=1) + clock.now - written[200]  # the RPO is the host's, as before


@pytest.mark.parametrize(
    "rpo, location, why",
    [
        (None, "region", "the bucket reports rpo none (location type region), which bounds no replication"),
        ("ASYNC_SOMEDAY", "dual-region", "the bucket reports rpo ASYNC_SOMEDAY (location type dual-region)"),
    ],
    ids=["a regional bucket", "an rpo of a later API"],
)
def test_an_rpo_without_a_known_bound_is_never_complete(clock, rpo, location, why):
    bucket = DualRegionBucket(clock=clock, rpo=rpo)
    bucket.location_type = location
    _train(bucket, clock)
    clock.advance(days=30)  # however old

    report = _certify(bucket, clock)

    assert report.certified is None
    assert {r.reason for r in report.rejected} == {NOT_REPLICATED}
    assert {r.ready_in_s for r in report.rejected} == {None}
    assert report.rejected[0].detail.startswith(f"not known replicated: {why}")


def test_an_unanswered_rpo_read_is_never_complete(clock):
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    _train(bucket, clock)
    clock.advance(days=1)
    bucket.rpo_answers = False

    report = _certify(bucket, clock)

    assert report.certified is None
    assert report.rejected[0].detail == (
        "not known replicated: the bucket's rpo could not be read "
        "(gs://dual/ckpt: get_bucket failed after 5 attempt(s) (503))"
    )


def test_a_checkpoint_half_written_counts_from_its_last_object(clock):
    # step 300's shards landed 20 minutes ago, its manifest (the commit) only 5 minutes ago
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    _train(bucket, clock, steps=(100, 200))
    clock.advance(minutes=10)
    write_checkpoint(bucket, "manifest", 300, commit=False)
    clock.advance(minutes=15)
    write_checkpoint(bucket, "manifest", 300, created=clock.now)  # the same shards again, then the manifest
    clock.advance(minutes=5)

    report = _certify(bucket, clock)

    assert report.certified.step == 200
    assert (report.rejected[0].step, report.rejected[0].reason, report.rejected[0].ready_in_s) == (
        300,
        REPLICATING,
        10 * 60,
    )


def test_an_old_checkpoint_touched_again_replicates_again(clock):
    # one shard of step 200 rewritten (by hand, or a job that restarted at that step): it is new bytes
    bucket = DualRegionBucket(clock=clock, rpo=TURBO)
    _train(bucket, clock)
    clock.advance(hours=1)
    shard = "step_0000200/shard-000001.bin"
    bucket.put(shard, bucket.peek(shard))
    clock.advance(minutes=1)

    report = _certify(bucket, clock)

    assert report.certified.step == 300
    older = certify_replica(
        bucket, bucket, layout="manifest", at=clock.now, older_than=300, replicated_by="gcs-dual-region"
    )
    assert older.certified.step == 100
    assert older.rejected[0].detail.startswith(f"replicating: {shard} was written")


# -- the real adapter, on fake-gcs-server behind the proxy that adds the rpo -------------------


def test_neither_gcs_peer_reports_an_rpo(fake_gcs_endpoint, gcs_endpoint):
    """Fails when a peer starts to report the setting: then the proxy can go."""
    fake = GcsStore(new_gcs_bucket(fake_gcs_endpoint), "ckpt", endpoint_url=fake_gcs_endpoint).bucket_rpo()
    emulator = GcsStore(new_gcs_bucket(gcs_endpoint), "ckpt", endpoint_url=gcs_endpoint).bucket_rpo()
    assert (fake.rpo, fake.location_type) == (None, "region")
    assert (emulator.rpo, emulator.location_type) == (None, "multi-region")


def test_on_fake_gcs_server_a_checkpoint_certifies_once_the_store_clock_passes_the_bound(fake_gcs_endpoint):
    with RpoProxy(fake_gcs_endpoint, rpo=TURBO) as proxy:
        bucket = GcsStore(new_gcs_bucket(fake_gcs_endpoint), "ckpt", endpoint_url=proxy.url)
        write_checkpoint(bucket, "manifest", 100)
        gets = proxy.bucket_gets  # (the client's upload reads the bucket once too)

        young = certify_replica(bucket, bucket, layout="manifest", replicated_by="gcs-dual-region")
        proxy.ahead = timedelta(minutes=15, seconds=2)  # the store's clock, 15 minutes on
        after = certify_replica(bucket, bucket, layout="manifest", replicated_by="gcs-dual-region")
        proxy.refuse = True
        bucket.max_attempts = 1
        unanswered = certify_replica(bucket, bucket, layout="manifest", replicated_by="gcs-dual-region")

    assert young.certified is None and young.rejected[0].reason == REPLICATING
    # the Date header is whole seconds, truncated: a store clock read that early waits longer
    assert 14 * 60 <= young.rejected[0].ready_in_s <= 15 * 60 + 1
    assert after.certified.step == 100 and after.calls["replica.bucket_rpo"] == 1
    assert unanswered.certified is None
    assert unanswered.rejected[0].detail.startswith(
        "not known replicated: the bucket's rpo could not be read"
    )
    assert proxy.bucket_gets - gets == 3  # one per certification
