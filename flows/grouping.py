"""A confirmed outage that joins its region's fleet run rather than failing over alone
(`core/fleet/group.py`, docs/fleet.md): which deployed runbooks group with this one, and the
failover's own stood-down entry naming the fleet run.

A failover groups only when its runbook has `fleet.group_window`, it is no fleet member (no
gate passed in), no dry run, not forced by a human, not a serving runbook (it moves traffic to
its hot standby at once), and `lifeboat deploy` deployed at least one other runbook of its
failed primary region grouping in the same lock store (`FleetMember`: what deploy read of
it). The fleet run is started with the members' paths and the outage start, never the
evidence: each member's failover confirms its own quorum. One confirmed while a fleet run of
its region is under way waits for that run to end, then groups afresh. A lock store or
Prefect that does not answer is unknown, never "fail over alone": the run fails, names the
store, and starts nothing; its re-run (same run id) goes on with the group it opened.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field

from lifeboat_dr.core.fleet.group import FleetUnderWay, Grouped, group_outage
from lifeboat_dr.core.ledger import LedgerEntry
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import LifeboatError, StandDown
from lifeboat_dr.runbooks.model import Runbook


class GroupingFailed(LifeboatError):
    """The region's lock store or Prefect did not answer (unknown), or a late runbook's wait
    ran out: nothing started. `entry`: the failover's ledger entry, which records it."""

    def __init__(self, message: str, entry: LedgerEntry | None = None):
        super().__init__(message)
        self.entry = entry


@dataclass(frozen=True)
class Fellows:
    """The runbooks that group with one: the failed region, the lock store they all name, and
    each runbook's path by name (the runbook itself among them)."""

    region: str
    lock_store: str
    paths: dict[str, str]


def grouping_key(rb: Runbook) -> tuple[str, str] | None:
    """(failed region, lock store) the runbook's outages group under; None: it fails over alone."""
    if rb.fleet.group_window is None or rb.serving is not None or not rb.fleet.lock_store:
        return None
    from lifeboat_dr.flows.fleet_inputs import holds_at  # not at import: the failover module's start-up

    return holds_at(rb)  # its holds are kept in the store it groups in


class FleetMember(BaseModel):
    """One deployed runbook that groups, as `lifeboat deploy` read it: what a failover needs to
    find its fellows without loading every runbook of the fleet (200 runbooks x 16 ms each, in
    each of 200 failovers at once)."""

    name: str = Field(description="The runbook's name (its join marker's).")
    path: str = Field(description="Its path on the worker, as the fleet run loads it.")
    region: str = Field(description="Its failed primary region, `<cloud>-<region>`.")
    lock_store: str = Field(description="The store its region's outages group in (`fleet.lock_store`).")

    @classmethod
    def of(cls, rb: Runbook, path: str) -> FleetMember | None:
        key = grouping_key(rb)
        return None if key is None else cls(name=rb.name, path=path, region=key[0], lock_store=key[1])


def fellows(rb: Runbook, path: str, fleet: list[FleetMember]) -> Fellows | None:
    """The members of `fleet` that group with `rb` (at `path`): its failed region and lock
    store; None when none but itself does. One of this region that groups in another store is
    skipped and said (`lifeboat deploy` refuses that; a stale or forged parameter may not)."""
    key = grouping_key(rb)
    if key is None:
        return None
    paths = {rb.name: path}
    for member in fleet:
        if member.name in paths or member.region != key[0]:
            continue
        if member.lock_store != key[1]:
            print(
                f"fleet: {member.name} groups in {member.lock_store}, not {key[1]}: not grouped with {rb.name}"
            )
            continue
        paths[member.name] = member.path
    return Fellows(*key, paths) if len(paths) > 1 else None


def should_group(
    rb: Runbook, *, fleet: list[FleetMember] | None, gated: bool, dry_run: bool, force: bool
) -> bool:
    """Whether this failover asks to group at all (before any runbook of `fleet` is read)."""
    return bool(fleet) and not (gated or dry_run or force) and grouping_key(rb) is not None


def join_fleet(
    rb: Runbook,
    group_at: Fellows,
    *,
    run_id: str,
    outage_started_at: datetime | None,
    evidence: list[str] | None,
) -> tuple[LedgerEntry, Grouped | None]:
    """Group this confirmed outage with its region's: stood down, its entry naming the fleet
    run it started (`Grouped`; None: another run forms the group, or this runbook is in the
    fleet run under way). One confirmed after that run started (late) waits, up to its RTO
    target, for it to end, then groups afresh: the next fleet run plans without what the first
    placed (`held_since`). `GroupingFailed` (the entry records it) when the lock store or
    Prefect did not answer, or the late wait ran out."""
    from lifeboat_dr.flows.wiring import build_ledger, store_opener
    from lifeboat_dr.providers.orchestrator import prefect_api

    ledger = build_ledger(rb, run_id=run_id, reopen=True)
    if outage_started_at is not None:
        ledger.mark("outage_start", outage_started_at)
    if evidence:
        ledger.note("evidence", "; ".join(evidence))
    parameters = {"outage_started_at": outage_started_at.isoformat()} if outage_started_at else {}

    def start(names: list[str], key: str) -> str:
        runbooks = [group_at.paths[name] for name in names]
        return prefect_api.start_run_once(
            prefect_api.FLEET_DEPLOYMENT, {"runbooks": runbooks, **parameters}, key
        )

    def group() -> Grouped:
        return group_outage(
            store_opener(rb)(group_at.lock_store),
            region=group_at.region,
            runbook=rb.name,
            run_id=run_id,
            members=group_at.paths.keys(),
            window_s=rb.fleet.group_window.total_seconds(),
            start_fleet=start,
            run_ended=prefect_api.run_ended,
        )

    grouped, waited_until = None, time.monotonic() + rb.rto_target.total_seconds()
    try:
        while grouped is None:
            try:
                grouped = group()
            except FleetUnderWay as e:
                if e.member:  # its alert again: it is in that run
                    ledger.note("stood down", str(e))
                    break
                ledger.note("waited for", e.fleet_run_id)  # late: it groups afresh when that run ends
                print(f"{rb.name}: {e}")
                if not _ended(e.fleet_run_id, waited_until):
                    _failed(
                        ledger,
                        f"fleet run {e.fleet_run_id} was still under way after {format_duration(rb.rto_target)} "
                        f"(this runbook's RTO target); {rb.name} was not failed over: re-run this run when it "
                        f"ends, or `lifeboat failover {rb.name} --force` fails it over alone",
                    )
            except StandDown as e:  # another run forms the group, this outage's marker in its window
                ledger.note("stood down", str(e))
                break
        if grouped is not None:
            ledger.note("fleet run", grouped.fleet_run_id)
            ledger.note("stood down", grouped.describe())
    except GroupingFailed:
        raise
    except LifeboatError as e:
        _failed(
            ledger,
            f"could not group with {group_at.region}'s fleet ({group_at.lock_store}): {e}; nothing was "
            "started: re-run this run when it answers",
        )
    print(f"{rb.name}: stood down: {ledger.entry.notes['stood down']}")
    return ledger.finish("stood-down"), grouped


def _failed(ledger, why: str):
    ledger.fail("group", why)
    raise GroupingFailed(why, ledger.finish("failed"))


LATE_POLL_S = 5.0  # how often a late runbook asks whether the fleet run under way has ended


def _ended(fleet_run_id: str, until: float) -> bool:
    """Wait for the fleet run to end (True), or `until` (monotonic) to pass (False); a Prefect
    that does not answer meanwhile is asked again, never read as "ended"."""
    from lifeboat_dr.providers.orchestrator import prefect_api

    while time.monotonic() < until:
        try:
            if prefect_api.run_ended(fleet_run_id):
                return True
        except LifeboatError as e:
            print(f"could not ask whether fleet run {fleet_run_id} ended: {e}")
        time.sleep(min(LATE_POLL_S, max(until - time.monotonic(), 0)))
    return False
