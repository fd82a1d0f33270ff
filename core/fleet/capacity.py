"""The standing capacity check (`lifeboat capacity`): is the secondary's quota enough, before an outage asks.

The seeds' minimum viable DR: "a verified secondary provider account with pre-approved service
limits for at least 50% of your primary cluster size". Checked twice over:

- per runbook: the quota on its candidates (outside its own primary) against half its GPUs
  (the minimum) and against all of them on one candidate (it can run there at all);
- per failure domain (each runbook's primary infra, or the ones asked for): every runbook
  whose primary lies in it fails at once; their GPUs against the quota of every place they
  may go, and the fleet plan of that outage: who runs and who waits.

Quota is what the runbooks declare (`fleet.quota`); when two declare the same place and GPU
type differently, the smaller counts (never plan on GPUs one of them doubts) and it is said.
Where a runbook asks (`fleet.live_quota`), the cloud's live quota caps it (`live_quota.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from lifeboat_dr.core.fleet.plan import FleetJob, FleetPlan, Place, plan_fleet

MINIMUM_SHARE = 0.5  # of the primary's GPUs, covered by the secondary's pre-approved quota


@dataclass(frozen=True)
class DeclaredQuota:
    """One runbook's declared quota for one place (`fleet.quota`)."""

    runbook: str
    place: Place
    gpus: int


def combined_quota(declared: Iterable[DeclaredQuota]) -> tuple[dict[Place, int], list[str]]:
    """The fleet's capacity per place (the smallest declaration of each) and one line per
    place the runbooks declare differently."""
    by_place: dict[Place, dict[str, int]] = {}
    for d in declared:
        by_place.setdefault(d.place, {})[d.runbook] = d.gpus
    quota = {place: min(said.values()) for place, said in by_place.items()}
    conflicts = [
        f"{place}: declared as {', '.join(f'{n} ({rb})' for rb, n in sorted(said.items()))}; "
        f"planning on {quota[place]}"
        for place, said in sorted(by_place.items())
        if len(set(said.values())) > 1
    ]
    return quota, conflicts


def in_domain(infra: str, domain: str) -> bool:
    """`gcp/us-east4` lies in the domain `gcp/us-east4` and in `gcp` (the whole cloud)."""
    parts, dparts = infra.strip("/").lower().split("/"), domain.strip("/").lower().split("/")
    return parts[: len(dparts)] == dparts


def surviving(candidates: Sequence[Place], domain: str) -> tuple[Place, ...]:
    """The candidates outside the failed domain, in order, each place once."""
    return tuple(dict.fromkeys(c for c in candidates if not in_domain(c.infra, domain)))


@dataclass(frozen=True)
class RunbookCapacity:
    name: str
    gpus: int
    quota_gpus: int  # the quota on its candidates outside its primary, all places together
    largest_gpus: int  # the most on any one of them: it runs in one place
    largest_place: Place | None

    @property
    def covers_minimum(self) -> bool:
        return self.quota_gpus >= MINIMUM_SHARE * self.gpus

    @property
    def covers_need(self) -> bool:
        return self.largest_gpus >= self.gpus

    def to_dict(self) -> dict:
        return {
            "runbook": self.name,
            "gpus": self.gpus,
            "quota_gpus": self.quota_gpus,
            "largest_place": str(self.largest_place) if self.largest_place else None,
            "largest_gpus": self.largest_gpus,
            "covers_minimum": self.covers_minimum,
            "covers_need": self.covers_need,
        }


@dataclass(frozen=True)
class DomainCapacity:
    """One outage: the domain lost, the runbooks it takes down, and their fleet plan."""

    domain: str
    runbooks: tuple[str, ...]
    primary_gpus: int
    quota_gpus: int  # the quota of every place they may go, outside the domain
    plan: FleetPlan

    @property
    def covers_minimum(self) -> bool:
        return self.quota_gpus >= MINIMUM_SHARE * self.primary_gpus

    @property
    def covers_need(self) -> bool:
        return not self.plan.waiting()

    def to_dict(self) -> dict:
        return {
            "domain": self.domain,
            "runbooks": list(self.runbooks),
            "primary_gpus": self.primary_gpus,
            "quota_gpus": self.quota_gpus,
            "covers_minimum": self.covers_minimum,
            "covers_need": self.covers_need,
            "placements": [
                {
                    "runbook": p.job,
                    "gpus": p.gpus,
                    "place": str(p.place) if p.place and not p.waits else None,
                    "downgraded": p.downgraded and not p.waits,
                    "wait_s": p.wait_s,
                }
                for p in self.plan.placements
            ],
        }


def runbook_capacity(job: FleetJob, quota: Mapping[Place, int]) -> RunbookCapacity:
    places = surviving(job.candidates, job.primary)
    largest = max(places, key=lambda p: quota.get(p, 0), default=None)
    return RunbookCapacity(
        name=job.name,
        gpus=job.gpus,
        quota_gpus=sum(quota.get(p, 0) for p in places),
        largest_gpus=quota.get(largest, 0) if largest else 0,
        largest_place=largest if largest and quota.get(largest, 0) else None,
    )


def domain_capacity(
    jobs: Sequence[FleetJob], quota: Mapping[Place, int], domain: str, *, recovery_s: float | None = None
) -> DomainCapacity:
    """The outage of `domain`: the jobs whose primary lies in it, planned together on the quota
    outside it."""
    hit = [j for j in jobs if in_domain(j.primary, domain)]
    moved = [replace(j, candidates=surviving(j.candidates, domain)) for j in hit]
    places = {p for j in moved for p in j.candidates}
    return DomainCapacity(
        domain=domain,
        runbooks=tuple(j.name for j in hit),
        primary_gpus=sum(j.gpus for j in hit),
        quota_gpus=sum(quota.get(p, 0) for p in places),
        plan=plan_fleet(moved, {p: n for p, n in quota.items() if p in places}, recovery_s=recovery_s),
    )


def default_domains(jobs: Iterable[FleetJob]) -> list[str]:
    """One outage per distinct primary: each runbook's primary infra."""
    return sorted({j.primary.strip("/").lower() for j in jobs if j.primary})


def fit_warning(job: FleetJob, quota: Mapping[Place, int]) -> str | None:
    """`validate`'s warning when no candidate's declared quota holds the job's GPUs at all."""
    found = runbook_capacity(job, quota)
    if found.covers_need:
        return None
    where = ", ".join(f"{p} {quota.get(p, 0)}" for p in surviving(job.candidates, job.primary))
    return (
        f"fleet.quota: no candidate can hold the job's {job.gpus} GPUs (declared quota: {where or 'none'}); "
        "raise the service limit or add a candidate with room"
    )


@dataclass(frozen=True)
class CapacityReport:
    """Every check of `lifeboat capacity` and the scheduled `capacity` flow, over one fleet."""

    quota: Mapping[Place, int]
    conflicts: Sequence[str]
    unsized: Sequence[tuple[str, str]]  # (runbook, why it cannot be sized)
    runbooks: Sequence[RunbookCapacity]
    outages: Sequence[DomainCapacity]
    live: Sequence[str] = ()  # one line per live quota pool read (`live_quota.capped`)

    @property
    def ok(self) -> bool:
        return not self.shortfalls()

    def shortfalls(self) -> list[str]:
        """One line for each check that fails, naming the runbook or the outage."""
        lines = [f"{name}: not planned: {why}" for name, why in self.unsized]
        if not self.quota:
            lines.append("no runbook declares fleet.quota: the secondary's GPUs are unknown")
        for r in self.runbooks:
            if not r.covers_minimum:
                lines.append(
                    f"{r.name}: {r.quota_gpus} GPUs of quota on its candidates, under the 50% minimum "
                    f"of its {r.gpus}"
                )
            if not r.covers_need:
                largest = f"{r.largest_place} {r.largest_gpus}" if r.largest_place else "none"
                lines.append(f"{r.name}: no candidate holds its {r.gpus} GPUs (largest: {largest})")
        for o in self.outages:
            if not o.covers_minimum:
                lines.append(
                    f"outage of {o.domain}: {o.quota_gpus} GPUs of quota where its runbooks may go, "
                    f"under the 50% minimum of the {o.primary_gpus} lost"
                )
            if not o.covers_need:
                waiting = ", ".join(p.job for p in o.plan.waiting())
                lines.append(f"outage of {o.domain}: {waiting} would wait for GPUs")
        return lines


def check_capacity(
    jobs: Sequence[FleetJob],
    declared: Iterable[DeclaredQuota],
    *,
    unsized: Sequence[tuple[str, str]] = (),
    domains: Sequence[str] = (),
    recovery_s: float | None = None,
    live: Callable[[dict[Place, int]], tuple[dict[Place, int], list[str]]] | None = None,
) -> CapacityReport:
    """The fleet's capacity checks: each job against the combined declared quota (capped by
    `live`, the cloud's live quota, when given), then each outage of `domains` (default: each
    job's primary) planned together."""
    quota, conflicts = combined_quota(declared)
    quota, live_lines = live(quota) if live is not None else (quota, [])
    return CapacityReport(
        quota=quota,
        conflicts=conflicts,
        live=live_lines,
        unsized=unsized,
        runbooks=[runbook_capacity(j, quota) for j in jobs],
        outages=[
            domain_capacity(jobs, quota, d, recovery_s=recovery_s) for d in domains or default_domains(jobs)
        ],
    )
