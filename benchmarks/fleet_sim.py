"""A 200-job region loss, simulated (core/fleet/sim.py states the model and its distributions):
RTO attainment per workload class without arbitration (each runbook alone) and with it, planned
at each confirmation and with a 2-minute window of confirmations, side by side, for 3 seeds."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from lifeboat_dr.core.fleet.sim import SimSettings, compare, table
from lifeboat_dr.kernel.durations import format_duration

SEEDS = (32, 33, 34)
WINDOWS_S = (0.0, 120.0)
RULES = ("alone", *(f"fleet, window {format_duration(timedelta(seconds=w))}" for w in WINDOWS_S))


def _d(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


def main() -> None:
    n = 50 if os.environ.get("LIFEBOAT_BENCH_QUICK") else 200
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}")
    for seed in SEEDS:
        start = time.perf_counter()
        runs = [compare(n, seed, SimSettings(fleet_window_s=w)) for w in WINDOWS_S]
        took = time.perf_counter() - start
        jobs, capacity, alone, _ = runs[0]
        outcomes = [alone, *(arbitrated for *_, arbitrated in runs)]
        print(f"\nregion loss: {n} jobs, {sum(j.gpus for j in jobs):,} GPUs lost, {sum(capacity.values()):,} "
              f"GPUs of quota on the secondary; seed {seed}; simulated in {took:.2f} s")  # fmt: skip
        print(f"  columns: {' | '.join(RULES)}")
        print(f"  {'class':19} {'jobs':>4} {'RTO':>4}  {'attained':>17}  {'median recovery':>26}  "
              f"{'failed launches':>15}")  # fmt: skip
        rows = [table(o) for o in outcomes]
        for per_rule in zip(*rows, strict=True):
            a = per_rule[0]
            attained = " ".join(f"{r.attained:5.0%}" for r in per_rule)
            median = " ".join(f"{_d(r.median_s):>8}" for r in per_rule)
            failed = " ".join(f"{r.failed_launches:4}" for r in per_rule)
            print(
                f"  {a.workload:19} {a.jobs:4} {_d(a.rto_s):>4}  {attained:>17}  {median:>26}  {failed:>15}"
            )
        for rule, out in zip(RULES, outcomes, strict=True):
            never = sum(1 for o in out if o.place is None)
            lost_h = sum(j.gpus * o.recovered_s for j, o in zip(jobs, out, strict=True)) / 3600
            print(f"  {rule:18}: {never:3} jobs never placed before the primary's return; "
                  f"{lost_h:,.0f} GPU-hours lost to the outage")  # fmt: skip
    print(f"\nload average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
