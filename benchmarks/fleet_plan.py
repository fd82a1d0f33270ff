"""The fleet plan's time for 1,000 runbooks lost at once (goal: <= 1 s), beside the baseline.

The baseline is what runs today: each runbook planned alone, taking the first candidate whose
quota holds its GPUs as if no other runbook wanted them: as fast as a plan can be, and it
books the same GPUs many times over (printed). The fleet: seeded random jobs of every class,
1-4 candidates each over 3 clouds x 3 regions x 3 GPU types, a third of them batches that end
(their GPUs go to who waits), and a secondary with room for about half the GPUs; then the
same number of loaded runbooks (the shipped examples) read into jobs and planned. The goal
line gives the slower of the two. Best of 5.
"""

from __future__ import annotations

import os
import random
import time

from lifeboat_dr.core.fleet.plan import REALTIME, FleetJob, Place, plan_fleet
from lifeboat_dr.flows.fleet_inputs import Unsized, fleet_job
from lifeboat_dr.runbooks.loader import load_runbook

GOAL_S = 1.0
RUNS = 5
PLACES = [
    Place(f"{c}/region-{r}", g)
    for c in ("aws", "gcp", "neo")
    for r in range(3)
    for g in ("H100", "A100", "L4")
]
WORKLOADS = ("pretraining", "finetuning", "batch-inference", REALTIME)


def fleet(n: int, seed: int = 32) -> tuple[list[FleetJob], dict[Place, int]]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        workload = rng.choice(WORKLOADS)
        jobs.append(
            FleetJob(
                name=f"job-{i:04d}",
                workload=workload,
                gpus=rng.choice((8, 8, 16, 32, 64, 128, 256)),
                rto_s=rng.choice((10.0, 300.0, 1800.0, 3600.0)),
                candidates=tuple(rng.sample(PLACES, rng.randint(1, 4))),
                gpu_hour_usd=rng.choice((None, 1.2, 2.5, 3.8, 4.5)),
                priority=rng.choice((0, 0, 0, 1, 2)),
                runtime_left_s=rng.uniform(600, 6 * 3600) if workload == "batch-inference" else None,
            )
        )
    total = sum(j.gpus for j in jobs)
    capacity = {p: total // (2 * len(PLACES)) for p in PLACES}  # room for about half
    return jobs, capacity


def each_alone(jobs: list[FleetJob], capacity: dict[Place, int]) -> dict[str, Place | None]:
    """Today: every runbook plans against the whole capacity, as if it were alone."""
    return {j.name: next((c for c in j.candidates if capacity.get(c, 0) >= j.gpus), None) for j in jobs}


def shipped_copies(n: int) -> list:
    """`n` loaded runbooks: the four shipped SkyPilot examples, renamed in turn."""
    names = ("llama-70b-pretrain", "mistral-7b-sft", "batch-embed", "chat-serving")
    shipped = [load_runbook(name) for name in names]
    return [shipped[i % len(shipped)].model_copy(update={"name": f"rb-{i:04d}"}) for i in range(n)]


def from_runbooks(runbooks: list):
    """The composition root's part too: each loaded runbook read into a FleetJob, then all
    planned (the YAML was parsed when the runbook's alert arrived: not counted)."""
    jobs = [j for j in map(fleet_job, runbooks) if not isinstance(j, Unsized)]
    return plan_fleet(jobs, {p: 4096 for j in jobs for p in j.candidates})


def best_of(runs: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    n = 200 if os.environ.get("LIFEBOAT_BENCH_QUICK") else 1000
    jobs, capacity = fleet(n)
    print(f"fleet plan: {n:,} runbooks, {sum(j.gpus for j in jobs):,} GPUs lost, "
          f"{sum(capacity.values()):,} GPUs of secondary quota; best of {RUNS}")  # fmt: skip
    load = os.getloadavg()[0]
    alone_s, alone = best_of(RUNS, lambda: each_alone(jobs, capacity))
    plan_s, plan = best_of(RUNS, lambda: plan_fleet(jobs, capacity, recovery_s=4 * 3600))
    booked: dict[Place, int] = {}
    for j in jobs:
        if alone[j.name] is not None:
            booked[alone[j.name]] = booked.get(alone[j.name], 0) + j.gpus
    over = sum(max(0, booked[p] - capacity[p]) for p in booked)
    used = plan.used()
    print(f"  each alone (today): {alone_s:.4f} s; {sum(1 for v in alone.values() if v)} placed, "
          f"{over:,} GPUs booked past the quota")  # fmt: skip
    print(f"  fleet plan:         {plan_s:.4f} s; {len(plan.placed())} placed now "
          f"({sum(1 for p in plan.placed() if p.downgraded)} downgraded), {len(plan.waiting())} wait; "
          f"{sum(max(0, used[p] - capacity[p]) for p in used)} GPUs past the quota")  # fmt: skip
    runbooks = shipped_copies(n)
    read_s, _ = best_of(RUNS, lambda: from_runbooks(runbooks))
    print(f"  from {n:,} loaded runbooks (fleet_inputs.fleet_job each, then the plan): {read_s:.4f} s")
    print(f"  load average (1 min) at start: {load:.2f}")
    worst = max(plan_s, read_s)  # the goal holds for both: the plan alone, and read from runbooks
    verdict = "PASS" if worst <= GOAL_S else "FAIL"
    print(f"GOAL fleet-plan-{n}: {verdict} {worst:.4f} s vs {alone_s:.4f} s (<= {GOAL_S:g} s)")


if __name__ == "__main__":
    main()
