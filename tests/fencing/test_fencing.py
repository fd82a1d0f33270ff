from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fencing import (
    LEASE_KEY,
    check_lease,
    fence,
    fence_job,
    guarded_commit,
    marker_body,
    marker_is_fenced_out,
    read_lease,
)
from lifeboat_dr.kernel.errors import ConfigError, PreconditionFailed, StopFailover
from lifeboat_dr.providers.storage.base import Capabilities
from lifeboat_dr.providers.storage.local import LocalStore

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_first_failover_creates_the_lease_at_epoch_one(store):
    lease = fence(store, run_id="run-a", holder="secondary:gcp/us-central1", clock=lambda: T0)
    assert (lease.epoch, lease.holder, lease.run_id, lease.acquired_at) == (
        1,
        "secondary:gcp/us-central1",
        "run-a",
        T0,
    )
    assert read_lease(store)[0] == lease


def test_rerunning_the_same_failover_does_not_bump_the_epoch_twice(store):
    first = fence(store, run_id="run-a", holder="secondary", expect_epoch=0)
    again = fence(store, run_id="run-a", holder="secondary", expect_epoch=0)
    assert again == first and read_lease(store)[0].epoch == 1


def test_a_second_outage_bumps_the_epoch_again(store):
    fence(store, run_id="run-a", holder="secondary")
    lease = fence(store, run_id="run-b", holder="primary", expect_epoch=1)
    assert lease.epoch == 2 and lease.run_id == "run-b"


def test_failover_that_saw_an_older_epoch_stops_instead_of_fencing_the_winner(store):
    fence(store, run_id="run-a", holder="secondary", expect_epoch=0)
    with pytest.raises(StopFailover, match="another failover already fenced"):
        fence(store, run_id="run-b", holder="secondary", expect_epoch=0)
    assert read_lease(store)[0].run_id == "run-a"


def test_stale_training_writer_is_refused_at_commit(store):
    guarded_commit(store, "ckpt/step-100/COMMIT", my_epoch=0, step=100)
    fence(store, run_id="run-a", holder="secondary")
    with pytest.raises(StopFailover, match="fenced out"):
        guarded_commit(store, "ckpt/step-200/COMMIT", my_epoch=0, step=200)
    assert [o.key for o in store.list("ckpt/")] == ["ckpt/step-100/COMMIT"]
    assert check_lease(store, 1).run_id == "run-a"


def test_a_commit_marker_is_written_only_once(store):
    guarded_commit(store, "ckpt/step-100/COMMIT", my_epoch=0, step=100)
    with pytest.raises(PreconditionFailed):
        guarded_commit(store, "ckpt/step-100/COMMIT", my_epoch=0, step=100)


class _FenceDuring:
    """The store a writer sees: a failover lands right before (or right after) the
    writer's next lease write, as if the two raced."""

    def __init__(self, inner, *, before: bool):
        self.inner, self.uri, self.capabilities, self.before = inner, inner.uri, inner.capabilities, before
        self.fenced = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def put(self, key, data, **kw):
        if key == LEASE_KEY and self.fenced is None and self.before:
            self.fenced = fence(self.inner, run_id="run-a", holder="secondary")
        info = self.inner.put(key, data, **kw)
        if key == LEASE_KEY and self.fenced is None:
            self.fenced = fence(self.inner, run_id="run-a", holder="secondary")
        return info


def test_writer_whose_commit_loses_to_the_fence_writes_no_marker(store):
    with pytest.raises(StopFailover, match="fenced out"):
        guarded_commit(_FenceDuring(store, before=True), "ckpt/step-300/COMMIT", my_epoch=0, step=300)
    assert list(store.list("ckpt/")) == []


def test_commit_that_landed_just_before_the_fence_counts_whatever_the_clocks_say(store):
    def late():  # the writer's clock runs an hour ahead of the fencer's
        return datetime.now(UTC) + timedelta(hours=1)

    seq = guarded_commit(_FenceDuring(store, before=False), "ckpt/step-300/COMMIT", 0, 300, clock=late)
    lease = read_lease(store)[0]
    marker = b"".join(store.read("ckpt/step-300/COMMIT"))
    assert (seq, lease.epoch, lease.seal(0).commits) == (1, 1, 1)
    assert marker_is_fenced_out(marker, lease) is False


def test_certification_judges_older_epochs_by_the_seal_not_the_clock(store):
    guarded_commit(store, "ckpt/step-100/COMMIT", 0, 100)
    lease = fence(store, run_id="run-a", holder="secondary", clock=lambda: T0)
    counter = lease.seal(0).counter
    counted = marker_body(0, 100, 1, "primary", lambda: T0 + timedelta(days=1), counter=counter)
    lost = marker_body(0, 200, 2, "primary", lambda: T0 - timedelta(days=1), counter=counter)
    current = marker_body(1, 300, seq=1, active="secondary")
    assert [marker_is_fenced_out(m, lease) for m in (counted, lost, current)] == [False, True, False]
    assert marker_is_fenced_out(lost, None) is False


def test_a_commit_counted_on_another_lease_of_the_same_epoch_never_passes_for_a_sealed_one(tmp_path):
    """The job commits on its node's disk and an uploader copies each checkpoint to the
    primary's bucket; replication copies them on. Partitioned, the fence seals epoch 0 at the
    highest commit the secondary holds (seq 3 on the disk's lease). A zombie commit counted on
    the bucket's own lease (seq 1 there) must not pass for one of those three."""
    from lifeboat_dr.kernel.errors import ProviderUnavailable

    disk, bucket, secondary = (LocalStore(tmp_path / n) for n in ("disk", "bucket", "s"))
    for step in (10, 20, 30):
        guarded_commit(disk, f"step-{step}/lifeboat-commit.json", 0, step)
        secondary.put(
            f"step-{step}/lifeboat-commit.json", b"".join(disk.read(f"step-{step}/lifeboat-commit.json"))
        )

    class Down(LocalStore):
        def head(self, key):
            raise ProviderUnavailable("primary: connection refused")

    lease, _ = fence_job(secondary, Down(tmp_path / "bucket"), run_id="run-a", holder="x")
    assert (lease.seal(0).commits, lease.seal(0).basis) == (3, "replicated")
    guarded_commit(bucket, "step-40/lifeboat-commit.json", 0, 40)  # seq 1, on the bucket's lease
    zombie = b"".join(bucket.read("step-40/lifeboat-commit.json"))
    replicated = b"".join(secondary.read("step-30/lifeboat-commit.json"))
    assert [marker_is_fenced_out(m, lease) for m in (replicated, zombie)] == [False, True]


def test_an_epoch_fenced_while_its_store_was_down_is_sealed_at_the_highest_commit_replicated(tmp_path):
    from lifeboat_dr.kernel.errors import ProviderUnavailable

    class Down(LocalStore):
        def head(self, key):
            raise ProviderUnavailable("primary: connection refused")

    secondary = LocalStore(tmp_path / "s")
    # steps 90 and 100 (commits 6 and 7) reached the secondary before the outage
    for step, seq in ((90, 6), (100, 7)):
        secondary.put(
            f"ckpt/step-{step}/lifeboat-commit.json", marker_body(0, step, seq=seq, active="primary")
        )
    lease, _ = fence_job(secondary, Down(tmp_path / "p"), run_id="run-a", holder="x", clock=lambda: T0)
    assert (lease.seal(0).commits, lease.seal(0).basis) == (7, "replicated")

    late_clock = marker_body(0, 100, seq=7, active="primary", clock=lambda: T0 + timedelta(days=1))
    zombie = marker_body(0, 200, seq=8, active="primary", clock=lambda: T0 - timedelta(days=1))
    assert [marker_is_fenced_out(m, lease) for m in (late_clock, zombie)] == [False, True]


def test_a_seal_cut_by_a_clock_before_seals_were_counted_proves_no_commit():
    from lifeboat_dr.core.fencing import Lease, Seal

    legacy = Lease(1, "x", "run-a", T0, "secondary", 0, (Seal(0, "primary", T0, None),))
    early = marker_body(0, 100, seq=1, active="primary", clock=lambda: T0 - timedelta(days=1))
    assert marker_is_fenced_out(early, legacy) is True


def test_primary_store_unreachable_still_fences_the_secondary(tmp_path):
    from lifeboat_dr.kernel.errors import ProviderUnavailable

    class Down(LocalStore):
        def head(self, key):
            raise ProviderUnavailable("primary: connection refused")

    secondary, primary = LocalStore(tmp_path / "s"), Down(tmp_path / "p")
    lease, primary_lease = fence_job(secondary, primary, run_id="run-a", holder="secondary")
    assert lease.epoch == 1 and primary_lease is None


def test_fencing_both_stores_when_the_primary_answers(tmp_path):
    secondary, primary = LocalStore(tmp_path / "s"), LocalStore(tmp_path / "p")
    lease, primary_lease = fence_job(secondary, primary, run_id="run-a", holder="secondary")
    assert lease.epoch == primary_lease.epoch == 1
    assert fence_job(secondary, primary, run_id="run-a", holder="secondary") == (lease, primary_lease)


def test_store_without_preconditions_cannot_fence(tmp_path):
    class NoPreconditions(LocalStore):
        capabilities = Capabilities(
            crc32c_in_list=True, crc32c_in_head=True, conditional_writes=False, server_side_copy=False
        )

    with pytest.raises(ConfigError, match="conditional writes"):
        fence(NoPreconditions(tmp_path), run_id="run-a", holder="secondary")
