"""The failover's certify step on one GCS dual-region bucket: what is still replicating is
named, with the time until the bucket vouches for it, in the step's answer that the ledger's
certification note carries (core/failover/walk.py), or in the one line that stops the
failover when nothing is past the bound yet."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.failover.steps import Providers, ProviderSteps, StepSpec
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.gcs_dual_region import DualRegionBucket

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def _steps(bucket, clock):
    spec = StepSpec(
        layout="manifest",
        replicated_by="gcs-dual-region",
        blocked=(),
        candidates=(),
        provision_budget_s=1,
        first_step_timeout_s=1,
        parity_steps=0,
        parity_tolerance=0,
        job=lambda uri: None,
        quorum=QuorumPolicy(signals=()),
        probes=lambda: (),
        prestage=lambda: None,
        runbook="trainer",
    )
    providers = Providers(bucket, bucket, None, None, None, primary_probe=bucket)
    return ProviderSteps(
        spec, providers, run_id="failover-1", cluster="trainer-dr", outage_started_at=clock.now, clock=clock
    )


def test_the_step_certifies_the_newest_checkpoint_past_the_bound_and_names_the_younger_one():
    clock = Clock()
    bucket = DualRegionBucket(clock=clock)
    write_checkpoint(bucket, "manifest", 100, created=clock.now)
    clock.now += timedelta(minutes=20)
    write_checkpoint(bucket, "manifest", 200, created=clock.now)
    clock.now += timedelta(minutes=5)

    report = _steps(bucket, clock).certify()

    assert report.certified.step == 100
    (young,) = report.rejected
    assert (young.step, young.reason, young.ready_in_s) == (200, "replicating", 600)
    assert "complete in 10m" in young.detail


def test_nothing_past_the_bound_stops_the_failover_in_one_line_saying_when():
    clock = Clock()
    bucket = DualRegionBucket(clock=clock)
    write_checkpoint(bucket, "manifest", 100, created=clock.now)
    clock.now += timedelta(minutes=5)

    with pytest.raises(StopFailover) as e:
        _steps(bucket, clock).certify()

    assert str(e.value).startswith(
        "no certified checkpoint on gs://dual/ckpt (step 100: replicating — replicating:"
    )
    assert "complete in 10m" in str(e.value) and "\n" not in str(e.value)
