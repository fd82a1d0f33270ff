"""The `fleet-failover` flow: one outage, many runbooks, one plan, one decision.

Thin: the plan is `core/fleet/plan.py` over what `flows/fleet_inputs.py` reads of each runbook
(the declared quota, capped by the live one where a runbook asks), less what earlier fleet runs
of the outage hold (`core/fleet/holds.py`, read and written under the region's planning lock);
the question, its allow-list and the card's lines are `core/fleet/decision.py`; the record is
`core/fleet/record.py`. The flow asks once through the single-runbook gate (`flows/approval.py`:
the same pause, Slack card, signature check and refusals), then runs each placed runbook's
own failover body (`flows/failover.py`, `run_failover`) one after another in this run, each
with its own run id (`<fleet run>-<runbook>`), lock, fencing, certification and ledger entry,
its approval the fleet's verified decision: the whole plan's, or per job, where a denied
job's own entry records its denial and nothing of it acts. A re-run of the fleet run (its worker lost) skips
the members whose entry is completed or denied and lets the others go on from their own entries.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from prefect import flow
from prefect.states import Cancelled, Completed, Failed

from lifeboat_dr.kernel.errors import ConfigError, LifeboatError


class FleetFailoverFailed(LifeboatError):
    """A fleet failover that could not plan, or a member failover that did not complete."""


@dataclass(frozen=True)
class FleetSubject:
    """What the gate reads of a runbook, for the fleet: its name and approval section."""

    name: str
    approval: Any


@dataclass
class GateNotes:
    """The fleet gate's ledger: its marks and notes (the refusals among them), for the fleet entry."""

    notes: dict[str, str] = field(default_factory=dict)

    def mark(self, phase: str, at: datetime | None = None) -> None:
        self.notes[phase] = (at or datetime.now(UTC)).isoformat(timespec="seconds")

    def note(self, key: str, value: str) -> None:
        self.notes[key] = value

    def fail(self, phase: str, error, outcome: str = "failed") -> None:
        self.notes[phase] = f"{outcome}: {error}"


def _now() -> datetime:
    return datetime.now(UTC)


@flow(name="fleet-failover", log_prints=True)
def fleet_failover(
    runbooks: list[str],
    dry_run: bool = False,
    outage_started_at: datetime | None = None,
    evidence: list[str] | None = None,
    force: bool = False,
    approval: Literal["wait", "approve", "reject"] | None = None,
    recovery: str | None = None,
) -> Any:
    """Fail the runbooks of one outage over together: one plan, one approval, each its own failover.

    Args:
        runbooks: Paths of the runbook YAMLs on the worker, every one hit by the outage.
        dry_run: Rehearse: the plan as declared, each placed failover in its own sandbox.
        outage_started_at: When the outage began.
        evidence: The agreeing signals, passed to every member (empty: each checks its quorum).
        force: Fail over even if a member's quorum does not confirm (written in each ledger).
        approval: As the `failover` flow's: `approve` only in a dry run or when every runbook's
            sites are on this machine.
        recovery: When the primary is expected back (4h): the longest a job waits.
    """
    from prefect.runtime import flow_run

    return run_fleet(
        runbooks,
        run_id=str(flow_run.id or f"local-{_now():%Y%m%dT%H%M%S}"),
        flow_run=flow_run,
        dry_run=dry_run,
        outage_started_at=outage_started_at,
        evidence=evidence,
        force=force,
        approval=approval,
        recovery=recovery,
    )


def run_fleet(
    runbooks: list[str],
    *,
    run_id: str,
    flow_run,
    dry_run: bool = False,
    outage_started_at: datetime | None = None,
    evidence: list[str] | None = None,
    force: bool = False,
    approval: str | None = None,
    recovery: str | None = None,
):
    """The flow's body for one fleet run id, inside a flow run; its final state."""
    from lifeboat_dr.core.fleet.capacity import combined_quota, surviving
    from lifeboat_dr.core.fleet.decision import FleetDecisionGate
    from lifeboat_dr.core.fleet.record import FleetEntry, FleetLedger, job_record
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.failover import run_failover
    from lifeboat_dr.flows.fleet_inputs import Unsized, declared_quota, fleet_job, live_cap
    from lifeboat_dr.flows.guard import console_mode
    from lifeboat_dr.flows.wiring import build_gate
    from lifeboat_dr.kernel.durations import parse_duration
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task

    try:
        loaded = {path: load_runbook_and_task(path) for path in runbooks}
        recovery_s = parse_duration(recovery).total_seconds() if recovery else None
        modes = {
            console_mode(rb, approval or ("approve" if dry_run else None), rehearsal=dry_run)
            for rb in loaded.values()
        }
    except (ConfigError, ValueError) as e:
        return Failed(message=f"fleet failover: {e}", data=FleetFailoverFailed(str(e)))
    names = [rb.name for rb in loaded.values()]
    if twice := sorted({n for n in names if names.count(n) > 1}):  # one failover per runbook
        why = f"runbook(s) given twice: {', '.join(twice)}"
        return Failed(message=f"fleet failover: {why}", data=FleetFailoverFailed(why))
    read = {path: fleet_job(rb) for path, rb in loaded.items()}
    if unsized := [j for j in read.values() if isinstance(j, Unsized)]:
        why = "; ".join(f"{u.name}: {u.why}" for u in unsized)
        return Failed(message=f"fleet failover: not planned: {why}", data=FleetFailoverFailed(why))
    jobs = {j.name: replace(j, candidates=surviving(j.candidates, j.primary)) for j in read.values()}
    path_of = {rb.name: path for path, rb in loaded.items()}
    quota, _ = combined_quota(q for rb in loaded.values() for q in declared_quota(rb))
    notes = GateNotes()
    if not dry_run and (cap := live_cap(list(loaded.values()))) is not None:  # a rehearsal asks no cloud
        quota, live_lines = cap(quota)
        notes.note("live quota", "; ".join(live_lines) or "no AWS GPU place in the declared quota")
        print(f"live quota: {notes.notes['live quota']}")
    try:
        holds = [] if dry_run else _hold_stores(loaded.values())
        plan, held, planned = _plan_holding(jobs, quota, holds, run_id, outage_started_at, recovery_s)
    except LifeboatError as e:
        why = f"what earlier fleet runs of the outage hold is unknown: {e}; nothing was planned or started"
        return Failed(message=f"fleet failover: {why}"[:500], data=FleetFailoverFailed(why))
    fleet, digest = planned.fleet, planned.plan_digest
    member_id = {p.job: f"{run_id}-{p.job}" for p in plan.placements}
    ledger = LedgerFile()
    earlier = {p.job: e for p in plan.placed() if (e := ledger.entry(p.job, member_id[p.job])) is not None}
    done = {job: e for job, e in earlier.items() if e.outcome == "completed" or _denied(e)}
    started = outage_started_at or _now()
    for p in plan.placements:
        print(p.describe())

    if held is not None and held.gpus:
        notes.note("held", held.describe())
        print(notes.notes["held"])
    to_run = [p for p in plan.placed() if p.job not in done]
    decision = None
    if to_run:
        decision = _ask(plan, jobs, loaded, path_of, to_run, fleet, run_id, started, dry_run, modes, notes)
    said = _decision_text(decision, done)
    entries: dict[str, Any] = dict(done)
    failed: list[str] = []
    if decision is not None and decision.approved:
        for p in to_run:
            rb = loaded[path_of[p.job]]
            gate = FleetDecisionGate(
                decision, fleet, run_id, notify=build_gate(rb, drill=dry_run).notify, job=p.job
            )
            if not decision.approves(p.job):  # denied: its own entry says so; nothing of it acts
                entries[p.job] = _record_denial(rb, member_id[p.job], gate, dry_run)
                continue
            try:
                run_failover(
                    path_of[p.job],
                    run_id=member_id[p.job],
                    flow_run=flow_run,
                    dry_run=dry_run,
                    # one outage: a rehearsal's every member measures from the fleet's start,
                    # so a later member's RTO includes the members failed over before it
                    outage_started_at=started if dry_run else outage_started_at,
                    evidence=evidence,
                    force=force,
                    gate=gate,
                )
            except Exception as e:  # one member's failure is its own: the others still go
                print(f"{p.job}: failover failed: {e}")
            entries[p.job] = ledger.entry(p.job, member_id[p.job])
            if entries[p.job] is None or entries[p.job].outcome != "completed":
                failed.append(p.job)
    records = [
        job_record(
            jobs[p.job],
            p,
            entries.get(p.job),
            outcome="waiting"
            if p.waits
            else ("denied" if _denied(entries.get(p.job)) else (None if p.job in entries else "not run")),
        )
        for p in plan.placements
    ]
    entry = FleetEntry(
        fleet=fleet,
        run_id=run_id,
        plan_digest=digest,
        decision=said,
        drill=dry_run,
        jobs=records,
        notes=notes.notes,
    )
    FleetLedger().append(entry)
    try:
        _write_holds(holds, entry)
    except LifeboatError as e:  # its `planned` holds stand: they count as held, never as free
        print(f"{fleet}: could not record its outcomes as holds ({e}): its planned holds stand")
    print(f"{fleet}: {entry.summary()}")
    result = entry.model_dump(mode="json")
    if decision is not None and not any(decision.approves(p.job) for p in to_run):
        return Cancelled(message=f"fleet failover rejected: {said}"[:500], data=result)
    if failed:
        why = f"fleet failover: {', '.join(failed)} did not complete"
        return Failed(message=why, data=result)
    return Completed(message=entry.summary(), data=result)


def _plan_holding(jobs, quota, holds, run_id, outage_started_at, recovery_s):
    """(plan, `Held` or None without the outage's start, the holds written): under each region's
    planning lock, the plan without what earlier fleet runs of the outage hold, its own
    placements written as held (the entry carries the fleet's name and plan digest)."""
    from lifeboat_dr.core.fleet.decision import fleet_name, plan_digest
    from lifeboat_dr.core.fleet.holds import planning, read_holds
    from lifeboat_dr.core.fleet.plan import plan_fleet
    from lifeboat_dr.core.fleet.record import FleetEntry, held_since, job_record

    with ExitStack() as planning_locks:
        for store, region, _ in holds:
            planning_locks.enter_context(planning(store, region, run_id))
        held = None
        if outage_started_at is not None:
            earlier = [e for store, region, _ in holds for e in read_holds(store, region, excluding=run_id)]
            held = held_since(earlier, outage_started_at, jobs)
            # a later fleet run of the outage (a runbook confirmed while the first was under way)
            quota = {place: max(0, n - held.gpus.get(place, 0)) for place, n in quota.items()}
        plan = plan_fleet(list(jobs.values()), quota, recovery_s=recovery_s)
        planned = [
            job_record(jobs[p.job], p, None, outcome="waiting" if p.waits else "planned")
            for p in plan.placements
        ]
        entry = FleetEntry(
            fleet=fleet_name(plan),
            run_id=run_id,
            plan_digest=plan_digest(plan),
            decision="planned",
            jobs=planned,
        )
        _write_holds(holds, entry)
    return plan, held, entry


def _hold_stores(runbooks) -> list[tuple[Any, str, set[str]]]:
    """(store, region, runbook names) per place the fleet run keeps its holds (`holds_at`),
    sorted so that two runs take their planning locks in one order."""
    from lifeboat_dr.flows.fleet_inputs import holds_at
    from lifeboat_dr.flows.wiring import store_opener

    at: dict[tuple[str, str], list] = {}
    for rb in runbooks:
        at.setdefault(holds_at(rb), []).append(rb)
    return [
        (store_opener(rbs[0])(uri), region, {rb.name for rb in rbs})
        for (region, uri), rbs in sorted(at.items())
    ]


def _write_holds(holds, entry) -> None:
    """Write `entry`'s jobs as the run's holds, each region's in its store."""
    from lifeboat_dr.core.fleet.holds import write_holds

    for store, region, names in holds:
        write_holds(
            store, region, entry.model_copy(update={"jobs": [j for j in entry.jobs if j.runbook in names]})
        )


def _ask(plan, jobs, loaded, path_of, to_run, fleet, run_id, started, dry_run, modes, notes):
    """The fleet's one question, through the single-runbook gate."""
    from lifeboat_dr.core.fleet.decision import card_lines, fleet_approval
    from lifeboat_dr.flows.wiring import build_gate
    from lifeboat_dr.providers.chat.base import ApprovalCard

    placed = [loaded[path_of[p.job]] for p in to_run]
    subject = FleetSubject(fleet, fleet_approval([rb.approval for rb in placed], rehearsal=dry_run))
    elapsed = timedelta(seconds=round((_now() - started).total_seconds()))
    expected = {rb.name: elapsed + rb.failover.expected_ready for rb in placed}
    lines = card_lines(plan, jobs, expected)
    console = "approve" if modes == {"approve"} else ("reject" if "reject" in modes else "wait")
    gate = build_gate(subject, console=console, drill=dry_run)
    card = ApprovalCard(
        runbook=fleet,
        run_id=run_id,
        evidence=[
            f"fleet of {len(plan.placements)} runbook(s): {len(to_run)} to fail over now, "
            f"{len(plan.waiting())} wait"
        ],
        jobs=lines,
        placed=[p.job for p in to_run],
        cost_per_hour=sum(p.cost_per_h_usd or 0 for p in to_run),
        expected_rto=max(expected.values()),
        drill=dry_run,
    )
    decision = gate.request(card, ledger=notes)
    gate.announce()
    return decision


def _denied(entry) -> bool:
    """A member's entry that records a per-job denial (`FleetDecisionGate`): decided, not run."""
    return (
        entry is not None
        and entry.outcome == "aborted"
        and entry.notes.get("approval", "").startswith("denied")
    )


def _record_denial(rb, run_id: str, gate, dry_run: bool):
    """The denied member's own ledger entry: asked, denied by the fleet's decision, aborted."""
    from lifeboat_dr.flows.wiring import build_ledger

    ledger = build_ledger(rb, run_id=run_id, drill="dry-run" if dry_run else None, reopen=True)
    gate.request(None, ledger)
    return ledger.finish("aborted")


def _decision_text(decision, done) -> str:
    if decision is None and not done:
        return "none asked: no job has room on the secondary now"
    if decision is None:
        denied = sorted(job for job, e in done.items() if _denied(e))
        said = f"; denied earlier: {', '.join(denied)}" if denied else ""
        return f"none asked: every placed job had completed or was denied ({', '.join(sorted(done))}){said}"
    verdict = "approved" if decision.approved else "rejected"
    if decision.approved and decision.jobs is not None:
        verdict = (
            f"approved per job ({', '.join(decision.jobs)}; the others denied)"
            if decision.jobs
            else "denied every job"
        )
    return f"{verdict} by {decision.approver} via {decision.via}: {decision.reason}"
