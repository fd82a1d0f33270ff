"""A failback crashed mid-way and re-run, and a second failback racing the first: real
stores and the local compute of a sandbox, a real failed-over job on the secondary."""

import time
from pathlib import Path

import pytest

from lifeboat_dr.core.failover.walk import execute
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.flows.drills.base import amend
from lifeboat_dr.flows.sandbox import sandbox_images, sandboxed
from lifeboat_dr.flows.wiring import (
    build_failback_steps,
    build_steps,
    new_ledger,
    providers_for,
    settings_for,
    swapped,
)
from lifeboat_dr.kernel.errors import StandDown, StopFailover
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.loader import load_runbook
from tests.failover.conftest import Gate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def failed_over(tmp_path):
    """The sandboxed demo runbook failed over: its job trains on the secondary (50 ms a step)."""
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "failback-rerun", root=tmp_path)
    rb = amend(rb, job={"command": rb.job.command.replace("--steps 50", "--steps 1000 --step-seconds 0.05")})
    providers = providers_for(rb, registry=FakeRegistry(sandbox_images(rb)))
    over = build_steps(rb, run_id="over", providers=providers, evidence=["test: outage"])
    over.confirm()
    checkpoint = over.certify()
    over.fence()
    over.resume(over.provision(over.plan()), checkpoint)
    time.sleep(0.6)  # it commits a checkpoint of its own (every 5 steps)
    yield rb
    for name in providers.compute.clusters():
        providers.compute.teardown(name)


def failback_steps(rb, run_id):
    view = swapped(rb)
    return build_failback_steps(rb, run_id=run_id, providers=providers_for(view, registry=FakeRegistry()))


@pytest.mark.processes
def test_a_failback_crashed_after_its_fence_completes_when_re_run(failed_over):
    rb = failed_over
    crashed = failback_steps(rb, "back-1")
    crashed.confirm()
    crashed.certify()
    handed = crashed.fence().checkpoint.certified.step  # ... and the worker dies here

    again = failback_steps(rb, "back-1")  # the same run, scheduled again
    ledger = new_ledger(rb, "back-1", kind="failback")
    entry = execute(settings_for(rb), again, ledger, Gate(), run_id="back-1", drill=True)

    assert entry.outcome == "completed" and "parity_passed" in entry.phases, entry.notes
    assert entry.notes["handover"] == f"re-run: resumes from step {handed}, handed back before the crash"
    assert entry.checkpoint.endswith(f"step-{handed:08d}") and "within" in entry.notes["parity"]
    assert read_site_state({"primary": again.p.secondary, "secondary": again.p.primary}).epoch == 2


@pytest.mark.processes
def test_a_second_failback_racing_the_first_stands_down_before_its_fence(failed_over):
    rb = failed_over
    late = failback_steps(rb, "back-late")
    late.confirm()  # confirmed at epoch 1 ...
    first = failback_steps(rb, "back-first")
    first.confirm()
    first.fence()  # ... but the first fenced (epoch 2)

    with pytest.raises(StandDown, match="took the job"):
        late.recheck("fence")
    with pytest.raises(StopFailover, match="nothing to fail back: primary is active"):
        failback_steps(rb, "back-third").confirm()  # one that starts now finds nothing to do
