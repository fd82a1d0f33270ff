"""Re-running a crashed failover is idempotent; a second, concurrent failover stands down."""

from pathlib import Path

import pytest

from lifeboat_dr.core.fencing import read_lease
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.flows.wiring import build_steps, providers_for
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.loader import load_runbook

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path):
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "rerun", root=tmp_path)
    providers = providers_for(rb, registry=FakeRegistry())
    yield rb, providers
    for name in providers.compute.clusters():
        providers.compute.teardown(name)


def steps_for(world, run_id):
    rb, providers = world
    steps = build_steps(rb, run_id=run_id, providers=providers, evidence=["test: outage"])
    steps.confirm()
    return steps


def test_rerunning_the_same_failover_bumps_the_epoch_once_and_keeps_one_cluster(world):
    first = steps_for(world, "run-A")
    fenced = first.fence()
    cluster = first.provision(first.plan())

    again = steps_for(world, "run-A")  # the flow run crashed and is retried
    assert again.fence().epoch == fenced.epoch == 1
    assert again.provision(again.plan()).cluster == cluster.cluster
    assert world[1].compute.clusters() == [cluster.cluster]


def test_a_concurrent_second_failover_stands_down_instead_of_fencing_out_the_first(world):
    late = steps_for(world, "run-B")  # confirmed at epoch 0 ...
    steps_for(world, "run-A").fence()  # ... but run-A fenced first
    with pytest.raises(StopFailover, match="another failover already fenced this job"):
        late.fence()
    lease, _ = read_lease(world[1].secondary)
    assert (lease.epoch, lease.run_id) == (1, "run-A")


def test_the_fence_step_makes_the_secondary_active_on_both_stores_and_the_job_writes_under_it(world):
    from lifeboat_dr.core.sitestate import read_site_state

    rb, providers = world
    steps = steps_for(world, "run-A")
    fenced = steps.fence()
    state = read_site_state({"primary": providers.primary, "secondary": providers.secondary})
    assert (state.lineage, state.stale, len(fenced.stores)) == ("secondary@1", (), 2)
    job = steps.job("file:///ckpt/step-00000040")
    assert job.env["LIFEBOAT_EPOCH"] == "1" and job.env["LIFEBOAT_STORE"] == providers.secondary.uri
