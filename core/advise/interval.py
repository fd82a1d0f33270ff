"""Checkpoint-interval maths: Young, Daly, expected waste, loss per failure, RPO.

Units are in the names: `_s` seconds, `_usd` US dollars, `_gb` gigabytes (10^9 bytes).

The model (Young 1974, Daly 2006): the job computes for an interval `interval_s`, then blocks
for `checkpoint_write_s` (C) writing a checkpoint. Failures of the whole job arrive with mean
time between failures `mtbf_s` (M, the *cluster's* MTBF: one GPU failing stops a
synchronous job). After a failure the job spends `restart_s` (R) coming back, then redoes the
work since the newest completed checkpoint. A failure during a restart starts it over.
"""

from __future__ import annotations

import math


def cluster_mtbf_s(gpu_mtbf_s: float, gpus: int) -> float:
    """Cluster MTBF from one GPU's: independent failures add their rates, so M = m / n."""
    return gpu_mtbf_s / gpus


def gpu_mtbf_from_observed_s(failures: int, period_s: float, gpus: int) -> float:
    """One GPU's MTBF from an observed count: `failures` in `period_s` on `gpus` GPUs."""
    return period_s * gpus / failures


def young_interval_s(checkpoint_write_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum: sqrt(2 C M)."""
    return math.sqrt(2 * checkpoint_write_s * mtbf_s)


def daly_interval_s(checkpoint_write_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (Daly 2006).

    For C < 2M: sqrt(2CM) * [1 + 1/3 sqrt(C/2M) + 1/9 (C/2M)] - C; otherwise M.
    """
    c, m = checkpoint_write_s, mtbf_s
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def expected_waste_fraction(
    interval_s: float, checkpoint_write_s: float, restart_s: float, mtbf_s: float
) -> float:
    """Share of wall-clock time that is not useful work, for exponential failures.

    Daly's exact expected wall time for W of work is M e^(R/M) (e^((T+C)/M) - 1) W / T, so
    the useful share is T e^(-R/M) / (M (e^((T+C)/M) - 1)). Waste covers checkpoint writes,
    restarts and rework.
    """
    t, c, r, m = interval_s, checkpoint_write_s, restart_s, mtbf_s
    if t <= 0:
        return 1.0
    return 1.0 - t * math.exp(-r / m) / (m * math.expm1((t + c) / m))


def expected_rework_s(interval_s: float, checkpoint_write_s: float) -> float:
    """Work redone after a failure, first order: a failure lands uniformly in a period T + C."""
    return (interval_s + checkpoint_write_s) / 2


def expected_rework_exact_s(interval_s: float, checkpoint_write_s: float, mtbf_s: float) -> float:
    """Same, exactly, for exponential failures: E[X | X < P] = M - P / (e^(P/M) - 1), P = T + C.

    Slightly under P/2 because an early failure in the period is a little more likely.
    """
    p, m = interval_s + checkpoint_write_s, mtbf_s
    return m - p / math.expm1(p / m)


def expected_rpo_s(interval_s: float, checkpoint_write_s: float, replication_s: float = 0.0) -> float:
    """Expected age of the newest replicated checkpoint at a random failure: (T + C)/2 + lag."""
    return (interval_s + checkpoint_write_s) / 2 + replication_s


def worst_rpo_s(interval_s: float, checkpoint_write_s: float, replication_s: float = 0.0) -> float:
    """Largest such age: a failure just before the next checkpoint lands on the secondary."""
    return interval_s + checkpoint_write_s + replication_s


def gpu_hours(gpus: int, hours: float) -> float:
    return gpus * hours


def gpu_cost_usd(gpus: int, hours: float, gpu_hour_usd: float) -> float:
    """What `gpus` GPUs cost for `hours`: the price of lost time on the whole cluster."""
    return gpus * hours * gpu_hour_usd


def longest_interval_within_rpo_s(
    rpo_target_s: float, checkpoint_write_s: float, replication_s: float = 0.0
) -> float | None:
    """The longest interval whose worst RPO (T + C + replication) meets the target: the
    least-waste one that does, since waste grows as T shrinks below Daly's. None if none can."""
    t = rpo_target_s - checkpoint_write_s - replication_s
    return t if t > 0 else None
