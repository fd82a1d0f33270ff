"""The S3 Cross-Region Replication fake, tested itself: it reports what S3's user guide says
a replicated object's HEAD answers, before, during and after the rule's lag."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.testing.bucket_replication import crr_pair


class Clock:
    now = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


def test_an_object_is_pending_until_the_lag_then_completed_on_the_source_and_a_replica(clock):
    primary, secondary, _ = crr_pair(clock, lag=timedelta(seconds=30))
    primary.put("ckpt/a", b"shard")
    assert primary.head("ckpt/a").replication == "PENDING"
    assert list(secondary.list()) == []
    clock.now += timedelta(seconds=30)
    assert primary.head("ckpt/a").replication == "COMPLETED"
    assert secondary.head("ckpt/a").replication == "REPLICA"
    assert secondary.peek("ckpt/a") == b"shard"


def test_a_permanent_failure_is_failed_and_never_copied(clock):
    primary, secondary, _ = crr_pair(clock, fails=lambda key: key == "ckpt/b")
    primary.put("ckpt/b", b"x")
    clock.now += timedelta(minutes=5)
    assert primary.head("ckpt/b").replication == "FAILED"
    assert secondary.peek("ckpt/b") is None


def test_a_region_down_leaves_objects_pending_and_they_land_when_it_is_back(clock):
    primary, secondary, _ = crr_pair(clock)
    primary.put("ckpt/c", b"x")
    secondary.outage = True
    clock.now += timedelta(minutes=5)
    assert primary.head("ckpt/c").replication == "PENDING"
    with pytest.raises(ProviderUnavailable):
        secondary.head("ckpt/c")
    secondary.outage = False
    assert secondary.head("ckpt/c").replication == "REPLICA"


def test_a_client_write_on_the_destination_is_not_a_replica_and_the_rule_filters_by_prefix(clock):
    primary, secondary, _ = crr_pair(clock, prefix="ckpt/")
    primary.put("_lifeboat/lease.json", b"{}")
    secondary.put("ckpt/d", b"by hand")
    clock.now += timedelta(minutes=5)
    assert primary.head("_lifeboat/lease.json").replication is None  # outside the rule
    assert secondary.peek("_lifeboat/lease.json") is None
    assert secondary.head("ckpt/d").replication is None


def test_a_new_version_is_pending_again_while_the_old_replica_stays(clock):
    primary, secondary, _ = crr_pair(clock)
    primary.put("ckpt/e", b"v1")
    clock.now += timedelta(minutes=1)
    primary.put("ckpt/e", b"v2")
    assert primary.head("ckpt/e").replication == "PENDING"
    assert (secondary.peek("ckpt/e"), secondary.head("ckpt/e").replication) == (b"v1", "REPLICA")
