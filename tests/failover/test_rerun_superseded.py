"""A re-run of a failover whose fence a later one ended (found by the fault simulator, #28).

The failover was killed proving parity; the failback completed; the failover's re-run, two
minutes later by hand, confirmed against the failback's lease, fenced a third epoch and took
the job back to the secondary, from its old checkpoint. The lease's seals now name the run
that took each epoch: a run whose epoch was ended stands down, whoever reads the stores.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.failover.steps import Providers, ProviderSteps, StepSpec
from lifeboat_dr.core.fencing import fence_job, read_lease
from lifeboat_dr.kernel.errors import StandDown
from lifeboat_dr.providers.storage.local import LocalStore


def steps_of(run_id: str, primary, secondary) -> ProviderSteps:
    spec = StepSpec(
        layout="manifest",
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
    return ProviderSteps(
        spec,
        Providers(primary, secondary, None, None, None),
        run_id=run_id,
        cluster="trainer-dr",
        evidence=("provider: unreachable",),
        outage_started_at=datetime.now(UTC),
    )


def test_a_failover_re_run_after_the_failback_stands_down(tmp_path):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    fence_job(secondary, None, run_id="failover-1", holder="lifeboat:trainer-dr", runbook="trainer")
    fence_job(
        primary,
        secondary,
        run_id="failback-1",
        holder="lifeboat:trainer",
        active="primary",
        runbook="trainer",
    )

    with pytest.raises(StandDown, match=r"this run's fence \(epoch 1, secondary active\) was ended"):
        steps_of("failover-1", primary, secondary).confirm()
    assert read_lease(secondary)[0].epoch == 2, "nothing fenced"


def test_a_failover_that_still_holds_its_lease_goes_on(tmp_path):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    fence_job(secondary, None, run_id="failover-1", holder="lifeboat:trainer-dr", runbook="trainer")

    assert steps_of("failover-1", primary, secondary).confirm().evidence
