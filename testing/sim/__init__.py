"""A deterministic simulator of Lifeboat's core (issue #28): the real certification,
replication, retention, site state, fencing, guarded commit, failover and failback walkers
and ledger, over in-memory stores and fake compute, driven by a seeded scheduler that
injects faults and checks invariants after every history. See docs/simulation.md.

    from lifeboat_dr.testing.sim import explore, run_history, seeded
    found = explore(seed=1, histories=200)       # histories 1..200
    history = run_history(seeded(17), seed=17)   # one, exactly as `make sim SEED=17`

`python -m lifeboat_dr.testing.sim --seed S --histories N` runs and reports (histories/s,
fault × actor × step coverage, each violation with its seed, commit and shrunk schedule).
"""

from lifeboat_dr.testing.sim.run import History, explore, run_history, seeded, shrink, still_fails
from lifeboat_dr.testing.sim.scheduler import ListChoices, SeededChoices
from lifeboat_dr.testing.sim.world import Scenario

__all__ = [
    "History",
    "ListChoices",
    "Scenario",
    "SeededChoices",
    "explore",
    "run_history",
    "seeded",
    "shrink",
    "still_fails",
]
