"""The fleet's ledger entry: one per fleet failover, beside each runbook's own entry.

Every job of the plan: its class RTO target, the RTO its own failover measured and whether it
met the target; the jobs that wait, with their expected wait; the decision and the plan's
digest it was signed over. Kept as JSON lines in `fleet.jsonl` beside the RTO ledger
(`LIFEBOAT_LEDGER`'s folder), append-only like it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from lifeboat_dr.core.fleet.plan import Place
from lifeboat_dr.core.ledger import DEFAULT_LEDGER, LedgerEntry
from lifeboat_dr.kernel.errors import WriteFailed


class FleetJobRecord(BaseModel):
    runbook: str
    workload: str
    rto_target_s: float
    outcome: str  # completed | failed | aborted | stood-down | denied (per job) | waiting | not run | planned (holds)
    run_id: str | None = None  # its own failover's run id (its ledger entry)
    place: str | None = None
    gpus: int | None = None  # what it was given there (None: it waits, or an entry older than this field)
    downgraded: bool = False
    rto_s: float | None = None  # measured by its own failover; None when it did not run or end (denied)
    met: bool | None = None  # rto_s within rto_target_s; None when not measured
    expected_wait_s: float | None = None  # for a waiting job: its expected wait (None: unknown)


class FleetEntry(BaseModel):
    fleet: str  # fleet-<digest>: the name the decision was signed for
    run_id: str  # the fleet flow's run
    plan_digest: str
    decision: str  # "approved by U1 via slack: ..." or the rejection
    drill: bool = False
    recorded_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    jobs: list[FleetJobRecord]
    notes: dict[str, str] = {}  # the fleet gate's: approval_requested, refusals, the decision

    def met(self) -> list[str]:
        return [j.runbook for j in self.jobs if j.met]

    def summary(self) -> str:
        ran = [j for j in self.jobs if j.rto_s is not None]
        waiting = [j for j in self.jobs if j.outcome == "waiting"]
        denied = [j for j in self.jobs if j.outcome == "denied"]
        said = f"{len(self.met())} of {len(ran)} failed-over job(s) met their class RTO; {len(waiting)} wait"
        return said + (f"; {len(denied)} denied" if denied else "")


def job_record(job, placement, entry: LedgerEntry | None, outcome: str | None = None) -> FleetJobRecord:
    """One job's line: `job` a `FleetJob`, `placement` its `Placement`, `entry` its own ledger
    entry (None when its failover did not run)."""
    rto = entry.rto.total_seconds() if entry is not None and entry.rto is not None else None
    return FleetJobRecord(
        runbook=job.name,
        workload=job.workload,
        rto_target_s=job.rto_s,
        outcome=outcome or (entry.outcome if entry is not None else "not run"),
        run_id=entry.run_id if entry is not None else None,
        place=str(placement.place) if placement.place and not placement.waits else None,
        gpus=placement.gpus if placement.place and not placement.waits else None,
        downgraded=placement.downgraded and not placement.waits,
        rto_s=rto,
        met=None if rto is None else rto <= job.rto_s,
        expected_wait_s=placement.wait_s if placement.waits else None,
    )


# a planned job may be running (its fleet run under way, or dead mid-run); a failed member may have
# left its cluster up: both count
HOLDING = ("planned", "completed", "failed")


@dataclass(frozen=True)
class Held:
    """What earlier fleet runs of an outage hold: GPUs per place, and each holding job, named
    with its outcome and fleet run (what the on-call looks up when a job waits for them)."""

    gpus: dict[Place, int]
    by: tuple[str, ...]

    def describe(self) -> str:
        where = ", ".join(f"{n} on {p}" for p, n in sorted(self.gpus.items()))
        return f"earlier fleet runs of this outage hold {where}: {', '.join(self.by)}"


def held_since(entries: Iterable[FleetEntry], since: datetime, planning: Collection[str]) -> Held:
    """What earlier fleet runs of this outage (recorded since `since`, drills left out; their
    holds, `core/fleet/holds.py`) gave jobs that run there, or may (a planned or failed one):
    what a later fleet run of the outage plans without. The newest record of each runbook
    counts; the runbooks planned now count none (an earlier placement of theirs is theirs to
    plan again)."""
    newest: dict[str, tuple[str, FleetJobRecord]] = {}
    for entry in entries:
        if not entry.drill and entry.recorded_at >= since:
            newest.update((job.runbook, (entry.run_id, job)) for job in entry.jobs)
    gpus: dict[Place, int] = {}
    by = []
    for name, (run_id, job) in sorted(newest.items()):
        if name in planning or job.outcome not in HOLDING or not job.place or job.gpus is None:
            continue
        infra, accelerator = job.place.split(" ", 1)
        place = Place(infra, accelerator)
        gpus[place] = gpus.get(place, 0) + job.gpus
        by.append(f"{name} ({job.outcome}, fleet run {run_id})")
    return Held(gpus, tuple(by))


class FleetLedger:
    """`fleet.jsonl` beside the RTO ledger; `WriteFailed` naming the path when it cannot write."""

    def __init__(self, path: str | Path | None = None):
        ledger = Path(os.environ.get("LIFEBOAT_LEDGER") or DEFAULT_LEDGER)
        self.path = Path(path) if path else ledger.with_name("fleet.jsonl")

    def append(self, entry: FleetEntry) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(entry.model_dump_json().encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise WriteFailed(f"cannot write the fleet ledger {self.path}: {e.strerror or e}") from None

    def read(self) -> list[FleetEntry]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [FleetEntry.model_validate_json(line) for line in lines if line.strip()]
