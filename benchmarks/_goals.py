"""The one line a benchmark prints per goal, and the run's table of them (`make bench`).

    GOAL <name>: PASS|FAIL <figure> vs <baseline> (<goal>)

`<name>` says which goal, starting with the benchmark's module name (then shape, case);
`<figure>` is this run's measurement, `<baseline>` what it is compared with (measured in the
same run where there is one) and `<goal>` the bar it must clear, e.g.

    GOAL certify_outage 1k refused: PASS 1.04x wall (CPU 0.97x) vs certify with the primary up (<= 1.2x)

Print it with `goal(...)` (or the same text yourself) from the benchmark's `main()`:
benchmarks/__main__.py collects every such line written to its sys.stdout (a child
process's own output is not seen), tables them at the end of the run, and exits 1 when
any says FAIL.
"""

from __future__ import annotations

import re

LINE = re.compile(
    r"^GOAL (?P<name>.+?): (?P<verdict>PASS|FAIL) (?P<figure>.+) vs (?P<baseline>.+) \((?P<goal>.+)\)$"
)


def goal_line(name: str, ok: bool, figure: str, baseline: str, target: str) -> str:
    return f"GOAL {name}: {'PASS' if ok else 'FAIL'} {figure} vs {baseline} ({target})"


def goal(name: str, ok: bool, figure: str, baseline: str, target: str) -> bool:
    """Print one goal's line; returns `ok`."""
    print(goal_line(name, ok, figure, baseline, target), flush=True)
    return ok


def table(rows: list[tuple[str, str]]) -> str:
    """(benchmark, GOAL line or a note: it raised, it has no goal) pairs as the run's table."""
    out = []
    for bench, line in rows:
        if m := LINE.match(line):
            out.append(f"  {m['verdict']}  {m['name']}: {m['figure']} vs {m['baseline']} ({m['goal']})")
        else:
            out.append(f"  ----  {bench}: {line}")
    return "\n".join(out)
