"""A discrete-event simulation of one region lost with many jobs in it: RTO attainment per
workload class, with the fleet's arbitration and without it (each runbook failing over alone).

The model, stated (every draw from one seeded `random.Random`; `SimSettings` holds the numbers):

- The region fails at t = 0. Each job's outage is confirmed after its detection delay, drawn
  uniformly per class (realtime inference: its router's health checks, seconds; training:
  the detection quorum's window, minutes).
- Every job needs all its GPUs from the secondary's shared quota, on one of its candidates.
  Once it holds them, it runs after a launch time drawn from a lognormal per class (realtime
  inference: a hot standby, seconds; batch: a warm slice, a minute or two; fine-tuning and
  pretraining: cold provisioning, many minutes). A batch then ends after a uniform run time,
  and frees its GPUs; the others run until the primary returns (`horizon_s`).
- Alone (today): on confirmation each job walks its candidates as its own plan ranks them. A
  place with room is its own at once; one without answers CapacityError only after a failed
  launch (lognormal), and the job tries its next candidate; after its last, it backs off and
  starts its list again. Whoever asks first gets the room: no class, priority or cost counts.
- Arbitrated: at each confirmation and each batch's end, the jobs confirmed and not placed are
  planned together on the free capacity (`plan_fleet`: realtime first, priority, cost of
  waiting, RTO) and the placed ones launch where the plan says, with no failed launch.

A job's recovery time is t from the failure to its running on the secondary; one not running by
`horizon_s` is counted at the horizon (it waited for the primary). Attainment: the share of a
class's jobs whose recovery time is within the class RTO.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lifeboat_dr.core.fleet.plan import REALTIME, FleetJob, Place, plan_fleet

CLASS_RTO_S = {  # the workload classes' default RTO targets (runbooks.model.DEFAULT_TARGETS)
    REALTIME: 10.0,
    "batch-inference": 300.0,
    "pretraining": 1800.0,
    "finetuning": 3600.0,
}
CLASSES = tuple(CLASS_RTO_S)


@dataclass(frozen=True)
class SimSettings:
    """The stated distributions: (low, high) for uniform draws, (median, sigma) for lognormal."""

    detection_s: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {
            REALTIME: (1.0, 4.0),
            "batch-inference": (30.0, 120.0),
            "finetuning": (60.0, 300.0),
            "pretraining": (60.0, 300.0),
        }
    )
    launch_s: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {
            REALTIME: (4.0, 0.3),
            "batch-inference": (120.0, 0.4),
            "finetuning": (360.0, 0.4),
            "pretraining": (720.0, 0.4),
        }
    )
    capacity_error_s: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {
            REALTIME: (2.0, 0.5),
            "batch-inference": (60.0, 0.5),
            "finetuning": (60.0, 0.5),
            "pretraining": (90.0, 0.5),
        }
    )
    backoff_s: float = 300.0  # alone: the wait before walking the candidate list again
    fleet_window_s: float = 120.0  # arbitrated: from the first confirmation (not realtime) to the fleet plan
    batch_runtime_s: tuple[float, float] = (1800.0, 3 * 3600.0)
    horizon_s: float = 6 * 3600.0  # the primary is back


@dataclass(frozen=True)
class Draws:
    """One job's draws, shared by both runs so the two differ only in the rule."""

    detect_s: float
    launch_s: float
    capacity_error_s: tuple[float, ...]  # one per failed launch, in turn (cycled)
    runtime_s: float | None


@dataclass(frozen=True)
class Outcome:
    job: str
    workload: str
    recovered_s: float  # failure -> running on the secondary (horizon_s: never)
    failed_launches: int
    place: Place | None
    held: tuple[float, float] | None  # when it took its GPUs there and gave them back (horizon_s: kept)

    def met(self) -> bool:
        return self.recovered_s <= CLASS_RTO_S[self.workload]


def draw(jobs: Sequence[FleetJob], settings: SimSettings, rng: random.Random) -> dict[str, Draws]:
    out = {}
    for j in jobs:
        lo, hi = settings.detection_s[j.workload]
        med, sigma = settings.launch_s[j.workload]
        emed, esigma = settings.capacity_error_s[j.workload]
        out[j.name] = Draws(
            detect_s=rng.uniform(lo, hi),
            launch_s=med * rng.lognormvariate(0.0, sigma),
            capacity_error_s=tuple(emed * rng.lognormvariate(0.0, esigma) for _ in range(8)),
            runtime_s=rng.uniform(*settings.batch_runtime_s) if j.workload == "batch-inference" else None,
        )
    return out


class _Run:
    """The shared machinery: an event heap, the free capacity, and the outcomes."""

    def __init__(self, jobs, capacity, draws, settings):
        self.jobs = {j.name: j for j in jobs}
        self.free = dict(capacity)
        self.capacity = dict(capacity)
        self.draws = draws
        self.settings = settings
        self.events: list[tuple[float, int, str, str, int]] = []  # (t, seq, kind, job, arg)
        self.seq = 0
        self.running: dict[str, tuple[float, Place]] = {}
        self.failed: dict[str, int] = dict.fromkeys(self.jobs, 0)
        self.held: dict[str, tuple[float, float]] = {}
        self.partial: dict[str, tuple[Place, int]] = {}  # alone: what a failing launch holds meanwhile

    def release(self, t: float, name: str) -> None:
        self.free[self.running[name][1]] += self.jobs[name].gpus
        self.held[name] = (self.held[name][0], t)

    def at(self, t: float, kind: str, job: str, arg: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, job, arg))

    def take(self, t: float, job: FleetJob, place: Place) -> None:
        self.free[place] -= job.gpus
        self.running[job.name] = (t + self.draws[job.name].launch_s, place)
        self.held[job.name] = (t, self.settings.horizon_s)
        if (runtime := self.draws[job.name].runtime_s) is not None:
            self.at(t + self.draws[job.name].launch_s + runtime, "end", job.name)

    def outcomes(self) -> list[Outcome]:
        horizon = self.settings.horizon_s
        return [
            Outcome(
                job=name,
                workload=j.workload,
                recovered_s=min(self.running.get(name, (horizon, None))[0], horizon),
                failed_launches=self.failed[name],
                place=self.running.get(name, (None, None))[1],
                held=self.held.get(name),
            )
            for name, j in self.jobs.items()
        ]


def simulate_alone(jobs, capacity, draws, settings: SimSettings) -> list[Outcome]:
    run = _Run(jobs, capacity, draws, settings)
    for j in jobs:
        run.at(draws[j.name].detect_s, "try", j.name, 0)
    while run.events:
        t, _, kind, name, i = heapq.heappop(run.events)
        if t >= settings.horizon_s:
            break
        job = run.jobs[name]
        if kind == "end":
            run.release(t, name)
        elif kind == "drop":  # the failed launch is torn down: what it held is free again
            place, got = run.partial.pop(name)
            run.free[place] += got
            last = i + 1 == len(job.candidates)
            run.at(t + (settings.backoff_s if last else 0.0), "try", name, 0 if last else i + 1)
        elif run.free.get(place := job.candidates[i], 0) >= job.gpus:
            run.take(t, job, place)
        else:  # it takes what is there, node by node, and learns it is short when the launch fails
            got = run.free.get(place, 0)
            run.free[place] = 0
            run.partial[name] = (place, got)
            error_s = draws[name].capacity_error_s[run.failed[name] % len(draws[name].capacity_error_s)]
            run.failed[name] += 1
            run.at(t + error_s, "drop", name, i)
    return run.outcomes()


def simulate_arbitrated(jobs, capacity, draws, settings: SimSettings) -> list[Outcome]:
    run = _Run(jobs, capacity, draws, settings)
    for j in jobs:
        run.at(draws[j.name].detect_s, "confirmed", j.name)
    others = [draws[j.name].detect_s for j in jobs if j.workload != REALTIME]
    window_ends = min(others, default=0.0) + settings.fleet_window_s
    run.at(window_ends, "window", "")
    waiting: list[FleetJob] = []
    while run.events:
        t, _, kind, name, _ = heapq.heappop(run.events)
        if t >= settings.horizon_s:
            break
        if kind == "end":
            run.release(t, name)
        elif kind == "confirmed":
            waiting.append(run.jobs[name])
        if run.events and run.events[0][0] == t:
            continue  # plan once for everything that happens at this instant
        # realtime at once; the others together, once the window of their confirmations closes
        ready = [j for j in waiting if j.workload == REALTIME or t >= window_ends]
        plan = plan_fleet(ready, run.free)
        for p in plan.placed():
            run.take(t, run.jobs[p.job], p.place)
        placed = {p.job for p in plan.placed()}
        waiting = [j for j in waiting if j.name not in placed]
    return run.outcomes()


@dataclass(frozen=True)
class ClassRow:
    workload: str
    jobs: int
    rto_s: float
    attained: float  # share of the class within its RTO
    median_s: float
    p90_s: float
    failed_launches: int


def table(outcomes: Sequence[Outcome]) -> list[ClassRow]:
    rows = []
    for workload in CLASSES:
        mine = sorted(o.recovered_s for o in outcomes if o.workload == workload)
        if not mine:
            continue
        rows.append(
            ClassRow(
                workload=workload,
                jobs=len(mine),
                rto_s=CLASS_RTO_S[workload],
                attained=sum(1 for o in outcomes if o.workload == workload and o.met()) / len(mine),
                median_s=mine[len(mine) // 2],
                p90_s=mine[min(len(mine) - 1, int(0.9 * len(mine)))],
                failed_launches=sum(o.failed_launches for o in outcomes if o.workload == workload),
            )
        )
    return rows


def region_loss_fleet(
    n: int, rng: random.Random, *, share: float = 0.55
) -> tuple[list[FleetJob], dict[Place, int]]:
    """`n` jobs of one lost region (a fifth realtime, three tenths batch, three tenths
    fine-tuning, a fifth pretraining), 1-3 candidates each over the secondary's 2 regions x
    2 GPU types, and quota for `share` of their GPUs, spread evenly."""
    places = [
        Place(region, gpu) for region in ("gcp/us-central1", "gcp/us-east4") for gpu in ("H100", "A100")
    ]
    sizes = {
        REALTIME: (8, 16),
        "batch-inference": (4, 8, 16),
        "finetuning": (8, 16, 32, 64),
        "pretraining": (64, 128, 256),
    }
    prices = {"H100": 3.8, "A100": 2.2}
    jobs = []
    for i in range(n):
        workload = rng.choices(CLASSES, weights=(0.2, 0.3, 0.2, 0.3))[0]
        candidates = tuple(rng.sample(places, rng.randint(1, 3)))
        jobs.append(
            FleetJob(
                name=f"job-{i:03d}",
                workload=workload,
                gpus=rng.choice(sizes[workload]),
                rto_s=CLASS_RTO_S[workload],
                candidates=candidates,
                gpu_hour_usd=prices[candidates[0].accelerator],
                primary="gcp/europe-west4",
            )
        )
    total = sum(j.gpus for j in jobs)
    return jobs, {p: int(share * total / len(places)) for p in places}


def compare(n: int = 200, seed: int = 32, settings: SimSettings | None = None):
    """Both runs over one seeded fleet and one set of draws: (alone, arbitrated) outcomes."""
    settings = settings or SimSettings()
    rng = random.Random(seed)
    jobs, capacity = region_loss_fleet(n, rng)
    draws = draw(jobs, settings, rng)
    return (
        jobs,
        capacity,
        simulate_alone(jobs, capacity, draws, settings),
        simulate_arbitrated(jobs, capacity, draws, settings),
    )
