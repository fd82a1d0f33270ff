"""A later fleet run of one outage (a runbook confirmed while the first was under way) plans
without what the earlier runs placed (`held_since`): never more than the capacity, across runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fleet.plan import Place
from lifeboat_dr.core.fleet.record import FleetEntry, FleetJobRecord, FleetLedger, held_since
from lifeboat_dr.flows.fleet_failover import fleet_failover
from tests.fleet.fleet_runbooks import fleet_runbook

USC1 = "gcp/us-central1"
OUTAGE = datetime.now(UTC) - timedelta(minutes=20)


def job(name: str, outcome: str = "completed", gpus: int | None = 96, place: str | None = f"{USC1} H100"):
    return FleetJobRecord(
        runbook=name, workload="pretraining", rto_target_s=1800, outcome=outcome, place=place, gpus=gpus
    )


def entry(*jobs: FleetJobRecord, at: datetime, drill: bool = False) -> FleetEntry:
    return FleetEntry(
        fleet="fleet-x",
        run_id="r",
        plan_digest="d",
        decision="approved",
        drill=drill,
        recorded_at=at,
        jobs=list(jobs),
    )


def test_held_counts_the_newest_record_of_each_runbook_of_this_outage_that_runs_or_may():
    now = OUTAGE + timedelta(minutes=10)
    entries = [
        entry(job("old-outage"), at=OUTAGE - timedelta(days=2)),  # another outage
        entry(job("rehearsed"), at=now, drill=True),  # a drill holds nothing
        entry(job("a", gpus=64), job("b", outcome="waiting", place=None, gpus=None), at=now),
        entry(job("a", gpus=32), job("c", outcome="failed", gpus=8), job("d", outcome="denied"), at=now),
        entry(job("planned-now", gpus=512), at=now),
    ]
    held = held_since(entries, OUTAGE, planning={"planned-now"})
    assert held == {Place(USC1, "H100"): 32 + 8}  # a's newest record, and c (its cluster may be up)


@pytest.mark.integration
def test_a_later_fleet_run_of_the_outage_waits_for_what_an_earlier_one_holds(
    tmp_path, prefect_server, ledger_path
):
    FleetLedger().append(entry(job("pretrain-a", gpus=96), at=OUTAGE + timedelta(minutes=5)))
    late = fleet_runbook(tmp_path, "pretrain-b", gpus=64, quota=((USC1, "H100", 128),))

    state = fleet_failover(
        runbooks=[str(late)], outage_started_at=OUTAGE, approval="reject", return_state=True
    )

    recorded = FleetLedger().read()[-1]
    assert recorded.notes["held"] == f"earlier fleet runs of this outage hold 96 on {USC1} H100"
    assert [(j.runbook, j.outcome) for j in recorded.jobs] == [("pretrain-b", "waiting")], state.message
