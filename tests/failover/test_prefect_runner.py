"""The same walk as Prefect task runs on a real server: one task run per step, retried only
on `ProviderUnavailable`."""

import pytest
from prefect import flow

from flows.failover import execute
from flows.wiring import settings_for
from lifeboat.errors import ProviderUnavailable
from lifeboat.failover.fake import ScriptedSteps, scripted_runbook
from lifeboat.ledger import RtoLedger
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
    from prefect.client.orchestration import get_client

    rb = scripted_runbook(
        name="job-p", approval={"required": False}, failover={"retries": 1, "retry_delay": "0s"}
    )
    steps, ledger = Flaky(), RtoLedger.for_runbook(rb, "run-p")

    @flow(name="failover-runner-test")
    def harness():
        from prefect.runtime import flow_run

        execute(settings_for(rb), steps, ledger, Gate(), run_id="run-p")
        return str(flow_run.id)

    run_id = harness()
    assert ledger.entry.outcome == "completed" and steps.plans == 2

    async def names():
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
            )
            return sorted(r.name.rsplit("-", 1)[0] for r in runs)

    import asyncio

    assert asyncio.run(names()) == sorted(
        ["confirm", "certify", "plan", "prestage", "fence", "provision", "resume", "prove"]
    )
