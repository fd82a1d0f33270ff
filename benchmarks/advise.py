"""Monte Carlo check of the advised checkpoint interval, printed as ratios.

For each scenario and failure distribution: simulated waste at Young's and Daly's interval
over the simulated grid-search optimum (1.000 = optimal), and the simulation's own time.
"""

from __future__ import annotations

import time

import numpy as np

from lifeboat_dr.core.advise import daly_interval_s, young_interval_s
from lifeboat_dr.core.advise.simulate import failure_gaps_s, grid_search_optimum, simulated_waste_fraction

H = 3600.0
SCENARIOS = {  # (C, R, M) seconds
    "3h MTBF, C 2m, R 10m": (120, 600, 3 * H),
    "8h MTBF, C 5m, R 10m": (300, 600, 8 * H),
    "5d MTBF, C 15m, R 30m": (900, 1800, 5 * 24 * H),
    "2h MTBF, C 15m, R 5m": (900, 300, 2 * H),
}
CYCLES = 200_000


def main() -> None:
    print(f"advise: simulated waste / grid-search optimum ({CYCLES:,} failure cycles, seed 7)")
    print(f"  {'scenario':24} {'failures':12} {'optimum':>8} {'Daly':>7} {'Young':>7} {'seconds':>8}")
    for name, (c, r, m) in SCENARIOS.items():
        for shape, label in ((1.0, "exponential"), (0.7, "weibull 0.7")):
            start = time.perf_counter()
            gaps = failure_gaps_s(m, CYCLES, weibull_shape=shape, seed=7)
            grid = daly_interval_s(c, m) * np.geomspace(0.2, 5.0, 193)
            _, best = grid_search_optimum(c, r, gaps, grid)
            daly = simulated_waste_fraction(daly_interval_s(c, m), c, r, gaps) / best
            young = simulated_waste_fraction(young_interval_s(c, m), c, r, gaps) / best
            took = time.perf_counter() - start
            print(f"  {name:24} {label:12} {best:8.2%} {daly:7.4f} {young:7.4f} {took:8.2f}")


if __name__ == "__main__":
    main()
