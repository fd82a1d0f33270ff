"""`python -m lifeboat_dr.testing.sim`: run histories, report, shrink what fails.

    --seed S --histories N     histories S … S+N-1 (`make sim SEED=S HISTORIES=N`)
    --schedule 0,3,0,1         replay one list of choices (a shrunk schedule)
    --scenario NAME            pin a history shape (issue #27's cases: --list-scenarios)
    --no-shrink                report violations without shrinking them
    --mutant NAME              put a known bug back (mutants.py) and see it found

Exit status 1 when any history violated an invariant.
"""

from __future__ import annotations

import argparse
import os
import sys

from lifeboat_dr.testing.sim.mutants import MUTANTS, mutated
from lifeboat_dr.testing.sim.run import (
    commit,
    coverage_table,
    describe,
    explore_parallel,
    parse_schedule,
    reach,
    run_history,
    schedule_lines,
    shrink,
    still_fails,
)
from lifeboat_dr.testing.sim.scenarios import SCENARIOS
from lifeboat_dr.testing.sim.scheduler import ListChoices


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.mutant:
        with mutated(args.mutant) as mutant:
            print(f"mutant {mutant.name}: {mutant.about}")
            return _main(args)
    return _main(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lifeboat_dr.testing.sim", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--histories", type=int, default=1)
    p.add_argument("--schedule", help="choices to replay: 0,3,0,1 or position:value pairs 1:3,3:1")
    p.add_argument("--jobs", type=int, default=1, help="processes to run the histories in")
    p.add_argument("--scenario", choices=sorted(SCENARIOS))
    p.add_argument("--list-scenarios", action="store_true")
    p.add_argument("--mutant", choices=sorted(MUTANTS), help="run with a known bug put back (mutants.py)")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--shrink-budget", type=float, default=90.0, help="wall seconds per violation")
    p.add_argument("--coverage", action="store_true", help="print the fault × actor × step table")
    return p


def _main(args) -> int:
    if args.list_scenarios:
        for name, scenario in sorted(SCENARIOS.items()):
            print(f"{name}: {scenario.about}")
        return 0
    scenario = SCENARIOS.get(args.scenario) if args.scenario else None
    if args.schedule is not None:
        values = parse_schedule(args.schedule)
        history = run_history(ListChoices(values), scenario=scenario)
        print(f"replayed {len(values)} choices (commit {commit()}): {len(history.violations)} violation(s)")
        print("\n".join(schedule_lines(history)))
        for v in history.violations:
            print(v.line())
        return 1 if history.violations else 0

    def progress(found) -> None:
        print(
            f"  … {found.histories} histories, {found.per_second:.1f}/s, "
            f"violations: {', '.join(f'{k} ×{len(v)}' for k, v in sorted(found.found.items())) or 'none'}",
            file=sys.stderr,
        )

    found = explore_parallel(args.seed, args.histories, args.jobs, scenario=scenario, progress=progress)
    met, total = reach(found.coverage, found.crashable)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{found.histories} histories (seeds {args.seed}…{args.seed + found.histories - 1}) in "
        f"{found.wall_s:.1f}s: {found.per_second:.1f} histories/s "
        f"(load average {load:.2f} on {os.cpu_count()} CPUs), {found.points / max(1, found.histories):.0f} "
        f"yield points per history; commit {commit()}"
    )
    print(f"fault × actor × step reached: {met} of {total} possible")
    print("runs: " + ", ".join(f"{k} ×{n}" for k, n in sorted(found.outcomes.items())))
    if args.coverage:
        print("\n".join(coverage_table(found.coverage, found.crashable)))
    if not found.found:
        print("no invariant violated")
        return 0
    print(f"violations (histories): {', '.join(f'{k} ×{n}' for k, n in sorted(found.counts.items()))}")
    for invariant, histories in sorted(found.found.items()):
        first = histories[0]
        if args.no_shrink:
            print(describe(invariant, first, None, None))
            continue
        values, shrunk = shrink(first.choices, still_fails(invariant, scenario), budget_s=args.shrink_budget)
        print(describe(invariant, first, shrunk, values))
        print(
            f"  seeds violating it: {', '.join(str(h.seed) for h in histories[:20])}"
            + (" …" if len(histories) > 20 else "")
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
