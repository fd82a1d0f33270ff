"""A later fleet run of one outage (a runbook confirmed while the first was under way) plans
without what the earlier runs placed (`held_since`), read from the region's lock store
(`core/fleet/holds.py`): never more than the capacity, across runs and across workers. A run
that died after planning holds its placements (half-done); one that ended frees what it did not
run, and its re-run plans its own afresh (twice); a hold that cannot be read fails the run
before it plans (forged)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prefect import flow
from prefect.runtime import flow_run as current_run

from lifeboat_dr.core.fleet.group import region_of
from lifeboat_dr.core.fleet.holds import holds_prefix, read_holds
from lifeboat_dr.core.fleet.plan import Place
from lifeboat_dr.core.fleet.record import FleetEntry, FleetJobRecord, FleetLedger, held_since
from lifeboat_dr.flows.fleet_failover import fleet_failover, run_fleet
from lifeboat_dr.providers.storage import open_store
from tests.fleet.fleet_runbooks import fleet_runbook

USC1 = "gcp/us-central1"
OUTAGE = datetime.now(UTC) - timedelta(minutes=20)
REGION = region_of("aws/us-east-1")


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
    assert held.gpus == {Place(USC1, "H100"): 32 + 8}  # a's newest record, and c (its cluster may be up)
    assert held.by == ("a (completed, fleet run r)", "c (failed, fleet run r)")


def lock_store(folder) -> str:
    return f"file://{folder / 'fleet-locks'}"


def runbook(folder, name: str, gpus: int):
    """A runbook of aws/us-east-1 whose region's holds are kept in `lock_store(folder)`, with 128
    H100 of quota on the secondary."""
    return fleet_runbook(
        folder, name, gpus=gpus, quota=((USC1, "H100", 128),), grouping=(lock_store(folder), "1s")
    )


@flow
def rejected_attempt(runbooks: list[str], run_id: str):
    """One attempt of fleet run `run_id` (a re-run keeps the run id), its plan rejected."""
    return run_fleet(
        runbooks, run_id=run_id, flow_run=current_run, outage_started_at=OUTAGE, approval="reject"
    )


def worker(monkeypatch, folder) -> None:
    """Run what follows as another worker: its own ledger folder (and fleet ledger)."""
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(folder / "ledger.jsonl"))


@pytest.mark.integration
def test_a_later_fleet_run_on_another_worker_waits_for_what_an_earlier_one_holds(
    tmp_path, prefect_server, ledger_path, monkeypatch
):
    early, late = runbook(tmp_path, "pretrain-a", gpus=96), runbook(tmp_path, "pretrain-b", gpus=64)
    asked = []

    def ask_then_die(*args):  # worker A plans, writes its holds, and dies before any member acts
        asked.append(read_holds(open_store(lock_store(tmp_path)), REGION, excluding=""))
        raise SystemExit("worker A lost")

    monkeypatch.setattr("lifeboat_dr.flows.fleet_failover._ask", ask_then_die)
    with pytest.raises(SystemExit):
        run_fleet([str(early)], run_id="fleet-a", flow_run=None, outage_started_at=OUTAGE)
    monkeypatch.undo()
    ((written,),) = asked  # its holds were in the region's store before it asked anyone
    assert [(j.runbook, j.outcome, j.gpus) for j in written.jobs] == [("pretrain-a", "planned", 96)]

    worker(monkeypatch, tmp_path / "worker-b")  # nothing of A's run is in B's own fleet ledger
    state = fleet_failover(
        runbooks=[str(late)], outage_started_at=OUTAGE, approval="reject", return_state=True
    )

    recorded = FleetLedger().read()[-1]
    assert recorded.notes["held"] == (
        f"earlier fleet runs of this outage hold 96 on {USC1} H100: pretrain-a (planned, fleet run fleet-a)"
    )
    assert [(j.runbook, j.outcome) for j in recorded.jobs] == [("pretrain-b", "waiting")], state.message


@pytest.mark.integration
def test_a_fleet_run_that_ends_frees_what_it_did_not_run_and_a_rerun_plans_its_own_afresh(
    tmp_path, prefect_server, ledger_path, monkeypatch
):
    early, late = runbook(tmp_path, "pretrain-a", gpus=96), runbook(tmp_path, "pretrain-b", gpus=64)
    for attempt in (1, 2):  # the same fleet run twice (a re-run): its own holds are not in its way
        rejected_attempt([str(early)], "fleet-a", return_state=True)
        (rewritten,) = read_holds(open_store(lock_store(tmp_path)), REGION, excluding="")
        assert [(j.runbook, j.outcome) for j in rewritten.jobs] == [("pretrain-a", "not run")], attempt
        assert "held" not in FleetLedger().read()[-1].notes
    worker(monkeypatch, tmp_path / "worker-b")

    fleet_failover(runbooks=[str(late)], outage_started_at=OUTAGE, approval="reject", return_state=True)

    (recorded,) = FleetLedger().read()
    assert "held" not in recorded.notes and recorded.jobs[0].place == f"{USC1} H100"


@pytest.mark.integration
def test_an_unreadable_hold_fails_the_fleet_run_naming_it_and_nothing_is_planned(
    tmp_path, prefect_server, ledger_path
):
    late = runbook(tmp_path, "pretrain-b", gpus=64)
    store = open_store(lock_store(tmp_path))
    store.put(f"{holds_prefix(REGION)}fleet-forged.json", b'{"fleet": "x", "jobs": "all of them"}')

    state = fleet_failover(
        runbooks=[str(late)], outage_started_at=OUTAGE, approval="reject", return_state=True
    )

    assert state.is_failed()
    assert f"{holds_prefix(REGION)}fleet-forged.json: not a fleet run's holds" in state.message
    assert "nothing was planned or started" in state.message
    assert FleetLedger().read() == [] and not ledger_path.exists()
