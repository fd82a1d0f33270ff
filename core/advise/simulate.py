"""Monte Carlo check of the interval maths: simulated waste for any failure distribution.

Renewal-reward: every failure starts a cycle, so the long-run waste share is
1 - sum(useful work per cycle) / sum(cycle lengths) over many independent cycles. In a cycle
of length X (time to the next failure) the job restarts for R, then completes
floor((X - R) / (T + C)) periods, each keeping T of work; the rest of X is waste (a cycle
shorter than R keeps nothing). This is the same model as `expected_waste_fraction` when X is
exponential, and holds for any X: here also Weibull with shape < 1 (failures that cluster).

Vectorised over the cycles; deterministic for a given seed. Reusing one sample of cycles
across intervals (common random numbers) makes comparisons between intervals precise.
"""

from __future__ import annotations

import math

import numpy as np


def failure_gaps_s(mtbf_s: float, n: int, *, weibull_shape: float = 1.0, seed: int = 0) -> np.ndarray:
    """`n` times between failures with mean `mtbf_s`; shape 1 is exponential."""
    rng = np.random.default_rng(seed)
    scale_s = mtbf_s / math.gamma(1 + 1 / weibull_shape)
    return scale_s * rng.weibull(weibull_shape, n)


def simulated_waste_fraction(
    interval_s: float, checkpoint_write_s: float, restart_s: float, gaps_s: np.ndarray
) -> float:
    """Long-run share of wall time that is not useful work, over the given failure gaps."""
    working_s = np.maximum(gaps_s - restart_s, 0.0)
    periods = np.floor(working_s / (interval_s + checkpoint_write_s))
    return float(1.0 - periods.sum() * interval_s / gaps_s.sum())


def grid_search_optimum(
    checkpoint_write_s: float,
    restart_s: float,
    gaps_s: np.ndarray,
    intervals_s: np.ndarray,
) -> tuple[float, float]:
    """The interval among `intervals_s` with the least simulated waste: (interval_s, waste)."""
    wastes = [simulated_waste_fraction(t, checkpoint_write_s, restart_s, gaps_s) for t in intervals_s]
    best = int(np.argmin(wastes))
    return float(intervals_s[best]), wastes[best]
