"""Monte Carlo: the advised (Daly) interval against a simulated grid-search optimum.

Seeded and vectorised; one sample of failure gaps per scenario is shared by every interval
tried, so the comparison is between intervals, not between random draws.
"""

import numpy as np
import pytest

from lifeboat_dr.core.advise import daly_interval_s, expected_waste_fraction
from lifeboat_dr.core.advise.simulate import failure_gaps_s, grid_search_optimum, simulated_waste_fraction

H = 3600.0
CYCLES = 100_000
SCENARIOS = {  # (checkpoint write C, restart R, cluster MTBF M), seconds
    "llama3-scale, 3h MTBF": (120, 600, 3 * H),
    "1k GPUs, 8h MTBF": (300, 600, 8 * H),
    "small cluster, 5d MTBF": (900, 1800, 5 * 24 * H),
    "slow checkpoint, 2h MTBF": (900, 300, 2 * H),
}


def _grid(c: float, m: float) -> np.ndarray:
    return daly_interval_s(c, m) * np.geomspace(0.2, 5.0, 97)


@pytest.mark.parametrize("shape", [1.0, 0.7], ids=["exponential", "weibull-0.7"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_advised_interval_wastes_within_5_percent_of_the_simulated_optimum(scenario, shape):
    c, r, m = SCENARIOS[scenario]
    gaps = failure_gaps_s(m, CYCLES, weibull_shape=shape, seed=7)
    advised = simulated_waste_fraction(daly_interval_s(c, m), c, r, gaps)
    _, optimum = grid_search_optimum(c, r, gaps, _grid(c, m))
    assert optimum <= advised + 1e-9  # the grid holds Daly's interval itself (factor 1.0)
    assert advised <= 1.05 * optimum


@pytest.mark.parametrize("shape", [1.0, 0.7], ids=["exponential", "weibull-0.7"])
def test_the_grid_search_can_tell_good_intervals_from_bad(shape):
    # Guards the test above against a flat, meaningless waste curve.
    c, r, m = SCENARIOS["1k GPUs, 8h MTBF"]
    gaps = failure_gaps_s(m, CYCLES, weibull_shape=shape, seed=7)
    _, optimum = grid_search_optimum(c, r, gaps, _grid(c, m))
    for factor in (0.2, 5.0):
        assert simulated_waste_fraction(factor * daly_interval_s(c, m), c, r, gaps) > 1.3 * optimum


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_simulated_exponential_waste_matches_the_exact_formula(scenario):
    c, r, m = SCENARIOS[scenario]
    gaps = failure_gaps_s(m, 400_000, seed=11)
    t = daly_interval_s(c, m)
    assert simulated_waste_fraction(t, c, r, gaps) == pytest.approx(
        expected_waste_fraction(t, c, r, m), rel=0.02
    )


def test_weibull_gaps_have_the_requested_mean_and_cluster_early():
    gaps = failure_gaps_s(8 * H, 400_000, weibull_shape=0.7, seed=3)
    assert gaps.mean() == pytest.approx(8 * H, rel=0.01)
    exponential = failure_gaps_s(8 * H, 400_000, seed=3)
    assert np.median(gaps) < np.median(exponential)  # shape < 1: many short gaps, a few long ones


def test_simulation_is_deterministic_for_a_seed():
    a = simulated_waste_fraction(3600, 300, 600, failure_gaps_s(8 * H, 10_000, weibull_shape=0.7, seed=5))
    b = simulated_waste_fraction(3600, 300, 600, failure_gaps_s(8 * H, 10_000, weibull_shape=0.7, seed=5))
    assert a == b
