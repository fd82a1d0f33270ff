"""Run one `failover`, `failback` or `recover` flow run, by its id, in this process, and SIGKILL the
process at a chosen point, as a worker lost mid-run: `python -m tests.failover.crashing_run
FLOW RUN_ID [POINT]` (the run's parameters are the server's; PREFECT_API_URL names it).

POINT is `<step>:landed`: the step's call returned (its action landed), the walker has not
recorded it yet; or `<milestone>:recorded`: the ledger write that first holds the milestone
has landed. Without a POINT the run goes to its end and prints `RESULT <json>`.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(cls, name: str) -> None:
    real = getattr(cls, name)

    def then_die(*args, **kwargs):
        real(*args, **kwargs)
        _die()

    setattr(cls, name, then_die)


def install(point: str, flow_name: str) -> None:
    what, moment = point.split(":")
    if moment == "recorded":
        from lifeboat_dr.core.ledger import LedgerFile

        append = LedgerFile.append

        def append_then_die(self, entry):
            append(self, entry)
            if what in entry.phases:
                _die()

        LedgerFile.append = append_then_die
    elif what == "approval":
        from lifeboat_dr.flows.approval import ChatGate

        _after(ChatGate, "request")
    elif flow_name == "recover":  # `act:landed`: the rung's action issued, not yet recorded
        from lifeboat_dr.core.guard.recovery import ComputeRungs

        _after(ComputeRungs, what)
    elif flow_name == "failback":
        from lifeboat_dr.core.failover.failback import FailbackSteps

        _after(FailbackSteps, what)
    else:
        from lifeboat_dr.core.failover.steps import ProviderSteps

        _after(ProviderSteps, what)


def main(flow_name: str, run_id: str, point: str | None = None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    from lifeboat_dr.flows.failback import failback
    from lifeboat_dr.flows.failover import failover, outcome_of
    from lifeboat_dr.flows.recovery import recover

    if point:
        install(point, flow_name)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    flow = {"failover": failover, "failback": failback, "recover": recover}[flow_name]
    state = run_flow(flow, flow_run=run, parameters=run.parameters, return_type="state")
    print("RESULT " + json.dumps(outcome_of(state)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
