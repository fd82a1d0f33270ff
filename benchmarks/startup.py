"""On-call commands start fast: `lifeboat --help`, `validate` and `render` as processes,
interleaved with a bare `python -c pass` in the same run.

Prints each command's median wall time, its excess over the bare interpreter, and a
GOAL line against the goal (≤ 0.3 s on an idle machine). A loaded machine inflates
both columns; the excess over the bare start is the part the command owns.

The commands run as an installed `lifeboat` does: with bytecode. A PYTHONDONTWRITEBYTECODE in
the caller's environment is dropped for them, so the warm-up run writes the .pyc files an
install (pip compiles them) would have; otherwise every run re-compiles Lifeboat's modules.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._goals import goal

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 0.3
REPEATS = 7
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "lifeboat --help": [sys.executable, "-m", "lifeboat_dr", "--help"],
    "lifeboat validate": [sys.executable, "-m", "lifeboat_dr", "validate", "runbooks/demo.yaml"],
    "lifeboat render": [sys.executable, "-m", "lifeboat_dr", "render", "runbooks/demo.yaml"],
}


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=ENV, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache and .pyc files
        _wall(argv)
    for _ in range(REPEATS):  # interleaved: drift on a shared machine hits every command alike
        for name, argv in COMMANDS.items():
            times[name].append(_wall(argv))
    bare = statistics.median(times["python -c pass"])
    print(f"{'command':<22} {'median s':>9} {'over bare s':>12}  goal ≤ {GOAL_S} s")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<22} {median:9.3f} {median - bare:12.3f}")
    for name, samples in times.items():
        if name != "python -c pass":
            median = statistics.median(samples)
            goal(
                f"startup {name}",
                median <= GOAL_S,
                f"{median:.3f} s",
                f"python -c pass {bare:.3f} s",
                f"<= {GOAL_S} s",
            )
