"""The `capacity` flow: `lifeboat capacity` every day over the deployed runbooks.

The secondary's service limits change without anyone telling the runbooks (a quota request
lapses, a new job joins the region): checked daily, a shortfall is a failed run saying which
runbook or outage falls short, before a region loss finds it (core/fleet/capacity.py).
`lifeboat deploy` writes every runbook it deploys into this deployment's `runbooks`.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.states import Failed

from lifeboat_dr.kernel.errors import ConfigError, LifeboatError


class CapacityShort(LifeboatError):
    """The secondary's declared quota misses the 50% minimum or a runbook's needs."""


@flow(name="capacity", log_prints=True)
def capacity(runbooks: list[str], fail: list[str] | None = None, recovery: str | None = None) -> Any:
    """Check the secondary's declared GPU quota against the runbooks' outages.

    Args:
        runbooks: Paths of the runbook YAMLs on the worker (`lifeboat deploy` fills them in).
        fail: Outages to plan (aws/us-east-1, or a whole cloud: aws); default each primary.
        recovery: When a failed primary is expected back (4h): the longest a job waits.
    """
    from lifeboat_dr.flows.fleet_inputs import fleet_capacity
    from lifeboat_dr.kernel.durations import parse_duration
    from lifeboat_dr.runbooks.loader import load_runbook

    try:
        loaded = [load_runbook(r) for r in runbooks]
        recovery_s = parse_duration(recovery).total_seconds() if recovery else None
    except (ConfigError, ValueError) as e:  # a runbook edited since deploy: its problems, no traceback
        return Failed(message=f"capacity: {e}", data=CapacityShort(str(e)))
    report = fleet_capacity(loaded, domains=fail or (), recovery_s=recovery_s)
    for line in report.live:
        print(f"live quota: {line}")
    for o in report.outages:
        print(
            f"outage of {o.domain}: {len(o.runbooks)} runbook(s), {o.primary_gpus} GPUs lost, "
            f"{o.quota_gpus} of quota where they may go; {len(o.plan.placed())} placed, "
            f"{len(o.plan.waiting())} wait"
        )
        for p in o.plan.placements:
            print(f"  {p.describe()}")
    short = report.shortfalls()
    if short:  # a failed run that says which, in one message; raising would log a traceback
        why = f"{len(short)} capacity check(s) fail: " + "; ".join(short)
        return Failed(message=why, data=CapacityShort(why))
    return {
        "runbooks": [r.to_dict() for r in report.runbooks],
        "outages": [o.to_dict() for o in report.outages],
    }
