"""The CI budget: 2,000 histories of the real core, every invariant checked after each, in
under three minutes on this machine; and the three known bugs, put back, each found within
that budget. `make sim HISTORIES=100000` runs the long search."""

from __future__ import annotations

import os

import pytest

from lifeboat_dr.testing.sim.faults import ALL_FAULTS
from lifeboat_dr.testing.sim.mutants import MUTANTS, mutated
from lifeboat_dr.testing.sim.run import explore_parallel, reach

# the fault simulator's CI budget and mutation checks (minutes; `make sim` runs more): a time
# budget, so `alone`; forks one process per job
pytestmark = [pytest.mark.alone, pytest.mark.processes]

HISTORIES = 2000
BUDGET_S = 180.0
JOBS = 2


def test_two_thousand_histories_within_the_budget_violate_nothing(capsys):
    found = explore_parallel(1, HISTORIES, JOBS)
    met, possible = reach(found.coverage, found.crashable)
    with capsys.disabled():
        print(
            f"\nsim budget: {found.histories} histories in {found.wall_s:.1f}s ({found.per_second:.1f}/s, "
            f"load average {os.getloadavg()[0]:.2f}); fault × actor × step reached {met} of {possible}; "
            f"violations: {', '.join(f'{k} ×{n}' for k, n in sorted(found.counts.items())) or 'none'}"
        )
    assert not found.found, "\n".join(
        f"{k}: seed {hs[0].seed} (make sim SEED={hs[0].seed}): "
        f"{next(v.line() for v in hs[0].violations if v.invariant == k)}"
        for k, hs in sorted(found.found.items())
    )
    assert found.histories == HISTORIES and found.wall_s <= BUDGET_S
    reached = {fault for fault, _, _ in found.coverage.met}
    assert reached == set(ALL_FAULTS), f"never reached: {sorted(set(ALL_FAULTS) - reached)}"
    assert met >= 0.8 * possible


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_known_bug_put_back_is_found_within_the_budget(name, capsys):
    with mutated(name) as mutant:
        found = explore_parallel(1, HISTORIES, JOBS, stop_on=mutant.finds)
    hits = sorted(mutant.finds & set(found.counts))
    first = min((h.seed for k in hits for h in found.found[k]), default=None)
    with capsys.disabled():
        print(f"\nmutant {name}: {', '.join(hits) or 'NOT FOUND'} at seed {first} ({found.wall_s:.1f}s)")
    assert hits, f"{mutant.about}: no history of {found.histories} violated {sorted(mutant.finds)}"
    assert found.wall_s <= BUDGET_S
