"""Re-runs the fault simulator found doing harm (#28): a failover re-run after the failback, a
re-run's provision tearing down the recovered job.

A re-run of a failover whose fence a later one ended:

The failover was killed proving parity; the failback completed; the failover's re-run, two
minutes later by hand, confirmed against the failback's lease, fenced a third epoch and took
the job back to the secondary, from its old checkpoint. The lease's seals now name the run
that took each epoch: a run whose epoch was ended stands down, whoever reads the stores.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lifeboat_dr.core.failover.steps import Providers, ProviderSteps
from lifeboat_dr.core.fencing import fence_job, read_lease
from lifeboat_dr.kernel.errors import ProviderUnavailable, StandDown
from lifeboat_dr.providers.compute.base import JobSpec, PlanOption
from lifeboat_dr.providers.compute.fake import FakeCompute
from lifeboat_dr.providers.storage.local import LocalStore
from tests.step_specs import bare_spec


def steps_of(run_id: str, primary, secondary) -> ProviderSteps:
    spec = bare_spec()
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


class FailingLaunches(FakeCompute):
    """The compute API answering every launch with a 503 (the cluster is still up)."""

    def launch(self, cluster, option, job=None):
        self.launch_calls.append((cluster, option.infra))
        raise ProviderUnavailable(f"{option.infra}: 503 (scripted)")


def test_a_re_runs_provision_keeps_the_cluster_its_first_attempt_left_up(tmp_path):
    """Found by the fault simulator: the re-run's provision relaunched the cluster by name, the
    launch met one 503, and the fallback tore the cluster down with the recovered job on it."""
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    compute = FakeCompute(job_seconds=None)
    option = PlanOption("gcp/us-central1", "a3-highgpu-8g", "H100:8", False, 88.49, rank=0)
    compute.launch("trainer-dr", option, JobSpec(name="trainer", command="train"))  # the first attempt's
    steps = steps_of("failover-1", primary, secondary)
    steps.p.compute = FailingLaunches(job_seconds=None)
    steps.p.compute._clusters = compute._clusters

    provisioned = steps.provision([option])

    assert provisioned.attempts == ("gcp/us-central1: already up, kept",)
    assert steps.p.compute.launch_calls == [] and "trainer-dr" in steps.p.compute._clusters
