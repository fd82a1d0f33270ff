"""The same walk as Prefect task runs on a real server: one task run per step, retried only
on `ProviderUnavailable`."""

import pytest
from prefect import flow

from lifeboat_dr.flows.failover import execute
from lifeboat_dr.flows.wiring import new_ledger, settings_for
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.testing.failover_steps import ScriptedSteps, scripted_runbook
from tests.failover.conftest import Gate

pytestmark = pytest.mark.integration


class Flaky(ScriptedSteps):
    """Plan throttled once (retryable), then fine."""

    def __init__(self):
        super().__init__({})
        self.plans = 0

    def plan(self):
        self.plans += 1
        if self.plans == 1:
            raise ProviderUnavailable("429 Too Many Requests")
        return super().plan()


def test_each_step_is_a_task_run_and_a_throttled_one_is_retried(prefect_server):

    rb = scripted_runbook(
        name="job-p", approval={"required": False}, failover={"retries": 1, "retry_delay": "0s"}
    )
    steps, ledger = Flaky(), new_ledger(rb, "run-p")

    @flow(name="failover-runner-test")
    def harness():
        from prefect.runtime import flow_run

        execute(settings_for(rb), steps, ledger, Gate(), run_id="run-p")
        return str(flow_run.id)

    run_id = harness()
    assert ledger.entry.outcome == "completed" and steps.plans == 2

    steps_run = ["confirm", "certify", "plan", "prestage", "fence", "provision", "resume", "prove"]
    assert sorted(_task_runs(run_id, expect=len(steps_run))) == sorted(steps_run)


def _task_runs(run_id: str, expect: int = 0) -> dict[str, str]:
    """step -> the final state of its task run in the flow run `run_id` (the server records
    task runs from events, after the flow may have ended: read again until `expect` are
    there and none is still pending or running)."""
    import asyncio
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
            )

    deadline = time.monotonic() + 15
    while True:
        # a task run the server has from an event before its state: not settled yet
        states = {
            r.name.rsplit("-", 1)[0]: r.state.type.value if r.state else "PENDING"
            for r in asyncio.run(read())
        }
        settled = len(states) >= expect and not {"PENDING", "RUNNING"} & set(states.values())
        if settled or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def test_a_failed_fence_fails_its_task_run_and_nothing_after_it_runs(prefect_server):
    """A permanent error is not retried: the fence's task run fails once, and provision,
    resume and prove get no task run at all."""
    from lifeboat_dr.kernel.errors import StopFailover

    rb = scripted_runbook(failover={"retries": 2, "retry_delay": "0s"})
    steps = ScriptedSteps({"fence": 0.2}, failing={"fence": StopFailover("lease held elsewhere")})
    ledger = new_ledger(rb, "run-f")

    @flow(name="failover-runner-fence-fails")
    def harness():
        from prefect.runtime import flow_run

        with pytest.raises(StopFailover):
            execute(settings_for(rb), steps, ledger, Gate(), run_id="run-f")
        return str(flow_run.id)

    states = _task_runs(harness(), expect=5)
    assert states == {s: "COMPLETED" for s in ("confirm", "certify", "plan", "prestage")} | {
        "fence": "FAILED"
    }
    assert [c[0] for c in steps.calls].count("fence") == 1
    assert ledger.entry.failures and ledger.entry.failures[0].phase == "fenced"


def test_a_run_whose_job_was_taken_before_the_fence_ends_its_fence_task_cancelled(prefect_server):
    """The re-check is the acting step's first part: a run that finds the job taken stands
    down from inside the fence's task run, which ends Cancelled (it did nothing), not Failed;
    nothing after the fence runs."""
    rb = scripted_runbook()
    steps = ScriptedSteps({}, taken_before=["fence"])
    ledger = new_ledger(rb, "run-t")

    @flow(name="failover-runner-taken")
    def harness():
        from prefect.runtime import flow_run

        execute(settings_for(rb), steps, ledger, Gate(), run_id="run-t")
        return str(flow_run.id)

    states = _task_runs(harness())
    assert ledger.entry.outcome == "stood-down"
    assert states["fence"] == "CANCELLED"
    assert "fence" not in [c[0] for c in steps.calls] and steps.rechecks == ["fence"]
    assert {s for s, state in states.items() if state == "COMPLETED"} == {
        "confirm",
        "certify",
        "plan",
        "prestage",
    }
