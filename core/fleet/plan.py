"""The fleet plan: when one outage fails many runbooks over at once, who gets the secondary's GPUs.

Each runbook planning alone would take the whole catalog as its own, and fifty of them would
book the same GPUs fifty times. Here every job of the outage is planned together against the
secondary's capacity (GPUs per place and GPU type: the declared quota), in one order:

1. realtime inference first (its users are waiting now);
2. then the runbook's `fleet.priority`, higher first;
3. then the cost of waiting, GPUs x $/h of lost compute, higher first;
4. then the class RTO, shorter first; then the name, so the plan is deterministic.

In that order each job takes the first of its candidates (the runbook's order) with room for
all its GPUs; a candidate of another GPU type than its first is a downgrade, and said so. A
job none fits waits. Later jobs may still take what an earlier one could not use (a small job
fits where a large one did not), never what the earlier one could: no job is ever passed over
for capacity it could have used.

The expected wait comes from the same rule run forward in time: a placed job whose remaining
run time is known (a batch that ends) frees its GPUs then, and the waiting jobs take them in
order; a job still waiting when the primary is expected back (`recovery_s`) waits that long
and resumes at home. No place is ever given more GPUs than its capacity, at any moment.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

REALTIME = "realtime-inference"


@dataclass(frozen=True, order=True)
class Place:
    """One pool of secondary capacity: a region of a cloud and a GPU type."""

    infra: str  # cloud/region, lower case, no trailing slash: gcp/us-central1
    accelerator: str  # GPU type, as the catalog names it: H100, A100-80GB

    def __str__(self) -> str:
        return f"{self.infra} {self.accelerator}"


@dataclass(frozen=True)
class FleetJob:
    """What the fleet plan needs of one runbook (`lifeboat_dr.flows.fleet_inputs` reads it)."""

    name: str  # the runbook's name
    workload: str  # its workload class (realtime-inference is placed first)
    gpus: int  # GPUs it runs on, on any candidate
    rto_s: float  # its RTO target, seconds
    candidates: tuple[Place, ...]  # where it may run, in the runbook's order; [0] is the GPU type it wants
    gpu_hour_usd: float | None = None  # price of one GPU-hour of its lost compute; None: the fleet's mean
    priority: int = 0  # `fleet.priority`: higher first, within its class
    runtime_left_s: float | None = None  # known remaining run time (a batch); None: runs until failback
    primary: str = ""  # its primary's infra (the failure domain), for the capacity check


@dataclass(frozen=True)
class Placement:
    """Where one job runs, or how long it waits."""

    job: str
    order: int  # its position in the fleet's order (0 first)
    gpus: int
    place: Place | None  # where it runs; None: it waits for the primary's recovery
    rank: int | None  # which of its candidates (0 = first choice); None while it has none
    downgraded: bool  # a GPU type other than its first candidate's
    wait_s: float | None  # 0: placed now; > 0: expected wait; None: no estimate (no recovery time given)
    cost_per_h_usd: float | None  # what each hour of waiting costs, GPUs x $/h; None: price unknown

    @property
    def waits(self) -> bool:
        return self.wait_s != 0

    def describe(self) -> str:
        if not self.waits:
            how = f"{self.place}" + (" (downgraded)" if self.downgraded else "")
            return f"{self.job}: {self.gpus} GPUs on {how}"
        wait = "an unknown time" if self.wait_s is None else _hours(self.wait_s)
        where = f", then {self.place}" if self.place else ", then the recovered primary"
        cost = "price unknown" if self.cost_per_h_usd is None else f"${self.cost_per_h_usd:,.0f}/h"
        return f"{self.job}: waits {wait}{where} ({cost} of lost compute)"


@dataclass(frozen=True)
class FleetPlan:
    """Every job of the outage, placed or waiting, in the fleet's order."""

    placements: tuple[Placement, ...]
    capacity: Mapping[Place, int]

    def placed(self) -> list[Placement]:
        return [p for p in self.placements if not p.waits]

    def waiting(self) -> list[Placement]:
        return [p for p in self.placements if p.waits]

    def used(self) -> dict[Place, int]:
        """GPUs allocated now, per place."""
        used: dict[Place, int] = {}
        for p in self.placed():
            used[p.place] = used.get(p.place, 0) + p.gpus
        return used


def fleet_order(jobs: Iterable[FleetJob]) -> list[FleetJob]:
    """The jobs in the order they are placed (see the module docstring)."""
    jobs = list(jobs)
    price = _price_of(jobs)
    return sorted(
        jobs,
        key=lambda j: (j.workload != REALTIME, -j.priority, -j.gpus * price(j), j.rto_s, j.name),
    )


def plan_fleet(
    jobs: Sequence[FleetJob], capacity: Mapping[Place, int], *, recovery_s: float | None = None
) -> FleetPlan:
    """Place `jobs` on `capacity` (GPUs per place; a place not in it has none), never past it.

    `recovery_s`: when the primary is expected back; a job still waiting then waits that long."""
    ordered = fleet_order(jobs)
    free = {place: n for place, n in capacity.items() if n > 0}
    start: dict[int, tuple[float, Place, int]] = {}  # order -> (when, where, candidate rank)
    releases: list[tuple[float, int]] = []  # (when, order) a placed job's GPUs free up

    def try_place(i: int, now: float) -> bool:
        job = ordered[i]
        for rank, place in enumerate(job.candidates):
            if free.get(place, 0) >= job.gpus:
                free[place] -= job.gpus
                start[i] = (now, place, rank)
                if job.runtime_left_s is not None:
                    heapq.heappush(releases, (now + job.runtime_left_s, i))
                return True
        return False

    waiting = [i for i in range(len(ordered)) if not try_place(i, 0.0)]
    while releases and waiting:
        now, i = heapq.heappop(releases)
        if recovery_s is not None and now >= recovery_s:
            break  # the primary is back: who still waits goes home
        _, place, _ = start[i]
        free[place] += ordered[i].gpus
        waiting = [w for w in waiting if place not in ordered[w].candidates or not try_place(w, now)]

    placements = []
    for i, job in enumerate(ordered):
        when, place, rank = start.get(i, (recovery_s, None, None))
        placements.append(
            Placement(
                job=job.name,
                order=i,
                gpus=job.gpus,
                place=place,
                rank=rank,
                downgraded=place is not None and place.accelerator != job.candidates[0].accelerator,
                wait_s=when,
                cost_per_h_usd=None if job.gpu_hour_usd is None else job.gpus * job.gpu_hour_usd,
            )
        )
    return FleetPlan(placements=tuple(placements), capacity=dict(capacity))


def _price_of(jobs: Sequence[FleetJob]):
    """A job's GPU-hour price; unknown ones are priced at the fleet's mean (1.0 when none is
    known), so they rank by GPU count among themselves and beside the others."""
    known = [j.gpu_hour_usd for j in jobs if j.gpu_hour_usd is not None]
    default = sum(known) / len(known) if known else 1.0
    return lambda j: default if j.gpu_hour_usd is None else j.gpu_hour_usd


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}h" if seconds >= 3600 else f"{seconds / 60:.0f}m"
