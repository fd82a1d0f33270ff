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


@pytest.mark.processes
def test_a_resume_keeps_the_job_already_running_from_its_checkpoint_and_restarts_one_from_another(world):
    from lifeboat_dr.flows.drills.base import amend

    rb, providers = world
    rb = amend(rb, job={"command": rb.job.command.replace("--steps 50", "--steps 2000 --step-seconds 0.05")})
    first = build_steps(rb, run_id="run-A", providers=providers, evidence=["test: outage"])
    first.confirm()
    chosen = first.certify()
    first.fence()
    cluster = first.provision(first.plan())
    started = first.resume(cluster, chosen)
    pid = providers.compute.status(cluster.cluster).detail

    again = steps_for((rb, providers), "run-A")  # the worker died before the resume was recorded
    again.fence()
    kept = again.resume(cluster, chosen)
    assert (started.kept, kept.kept) == (False, True)
    assert providers.compute.status(cluster.cluster).detail == pid == kept.job, "not restarted"

    older = again.certify(older_than=chosen.certified.step)  # a rollback: the job must restart
    assert not again.resume(cluster, older).kept
    assert providers.compute.status(cluster.cluster).detail != pid


def test_a_dry_run_re_run_goes_on_in_the_sandbox_its_first_attempt_made(tmp_path):
    demo = load_runbook(ROOT / "runbooks" / "demo.yaml")
    first = sandboxed(demo, "dry-1", root=tmp_path)
    marker = Path(first.store_uri(first.secondary.store).removeprefix("file://")) / "fenced-by-the-first"
    marker.write_text("epoch 1")

    again = sandboxed(demo, "dry-1", root=tmp_path, keep=True)
    assert marker.exists() and again.secondary.store == first.secondary.store
    sandboxed(demo, "dry-1", root=tmp_path)  # a new dry run under that name starts afresh
    assert not marker.exists()
