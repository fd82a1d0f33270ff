"""Both sites name one dual-region bucket (`replication: gcs-dual-region`): the site state is
one lease object, `_lifeboat/lease.json` in that store, and the writers' guarded commits and
every fence meet on it. Each site opens its own handle to it (flows/wiring.open_sites opens
the runbook's two URIs), so the fence's two writes, the old site's store then the one taking
over, are one conditional write and a re-read of its own run's lease."""

import pytest

from lifeboat_dr.core.fencing import LEASE_KEY, fence_job, guarded_commit, read_lease
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.kernel.errors import ProviderUnavailable, SiteStateUnknown, StopFailover
from lifeboat_dr.testing.memory_store import MemoryStore


@pytest.fixture(params=["memory", "fake-gcs"])
def one_bucket(request):
    """(the primary's handle, the secondary's handle) on one bucket and prefix."""
    if request.param == "memory":
        bucket = MemoryStore("dual")
        return bucket, bucket
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.testing.emulators import new_gcs_bucket

    endpoint = request.getfixturevalue("fake_gcs_endpoint")
    name = new_gcs_bucket(endpoint)
    return GcsStore(name, "ckpt", endpoint_url=endpoint), GcsStore(name, "ckpt", endpoint_url=endpoint)


def _sites(primary, secondary):
    return {"primary": primary, "secondary": secondary}


def test_the_failover_fences_the_writers_on_the_one_lease_they_commit_against(one_bucket):
    primary, secondary = one_bucket
    guarded_commit(primary, "step_100/lifeboat-commit.json", 0, 100)
    guarded_commit(primary, "step_200/lifeboat-commit.json", 0, 200)

    lease, on_primary = fence_job(secondary, primary, run_id="failover-1", holder="dr")

    assert (lease.epoch, lease.active) == (1, "secondary") and on_primary == lease
    (seal,) = lease.history
    assert (seal.epoch, seal.commits, seal.basis) == (0, 2, "fence")  # exact: the writers' own lease
    with pytest.raises(StopFailover, match="fenced out"):  # the zombie's next commit
        guarded_commit(primary, "step_300/lifeboat-commit.json", 0, 300)
    state = read_site_state(_sites(primary, secondary))
    assert (state.lineage, state.stale, state.answered) == ("secondary@1", (), ("primary", "secondary"))
    leases = [o.key for o in secondary.list("_lifeboat/") if o.key.endswith("lease.json")]
    assert leases == [LEASE_KEY]  # one record, where fencing keeps it


def test_a_failover_run_again_and_then_a_failback_each_bump_the_epoch_once(one_bucket):
    primary, secondary = one_bucket
    first = fence_job(secondary, primary, run_id="failover-1", holder="dr")
    again = fence_job(secondary, primary, run_id="failover-1", holder="dr")
    assert again == first

    back, other = fence_job(
        primary, secondary, run_id="failback-1", holder="home", active="primary", expect_epoch=1
    )

    assert (back.epoch, back.active, other) == (2, "primary", back)
    assert read_lease(primary)[0] == read_lease(secondary)[0] == back
    with pytest.raises(StopFailover, match="another failover already fenced"):  # a second failover of epoch 0
        fence_job(secondary, primary, run_id="failover-2", holder="dr", expect_epoch=0)


def test_with_the_bucket_down_nothing_is_fenced_and_the_site_state_is_unknown():
    bucket = MemoryStore("dual")
    guarded_commit(bucket, "step_100/lifeboat-commit.json", 0, 100)
    bucket.outage = True

    with pytest.raises(ProviderUnavailable):
        fence_job(bucket, bucket, run_id="failover-1", holder="dr")
    with pytest.raises(SiteStateUnknown, match="did not answer"):
        read_site_state(_sites(bucket, bucket))

    bucket.outage = False
    assert read_lease(bucket)[0].epoch == 0  # the writers' lease, untouched


def test_a_failback_catch_up_on_one_bucket_copies_nothing():
    from datetime import timedelta

    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.core.replication.direction import ReplicationSettings, replicate_by_site_state
    from lifeboat_dr.core.retention import RetentionPolicy
    from lifeboat_dr.standins.checkpoints import write_checkpoint

    bucket = MemoryStore("dual")
    fence_job(bucket, bucket, run_id="failover-1", holder="dr")
    commit_checkpoint(bucket, write_checkpoint(bucket, "manifest", 100), 100, 1)  # the DR job's
    before = {o.key: o.version for o in bucket.list() if not o.key.startswith("_lifeboat/")}
    settings = ReplicationSettings("trainer", "manifest", timedelta(hours=1), RetentionPolicy(2, 0))

    way, report = replicate_by_site_state(settings, bucket, bucket)

    assert way.source_role == "secondary" and report.failed == {} and report.bytes_copied == 0
    assert [t.copied for t in report.transfers] == [[]]  # every object is itself: skipped
    assert {o.key: o.version for o in bucket.list() if not o.key.startswith("_lifeboat/")} == before
