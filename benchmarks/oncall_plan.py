"""`lifeboat plan` start-up against `python -c pass`, as an on-call runs it (a process each).

Cold: a fresh plan cache, a cache miss (the optimizer runs: `import sky` plus SkyPilot's
optimizer over the shipped snapshot). Warm: the same runbook, task and catalog as the last plan,
so the remembered plan answers without importing SkyPilot. After one untimed warm-up (the .pyc
files, the offline catalog's copy), interleaved, 5 rounds, medians.
Goals: warm `plan` <= 1.5 s on an idle machine (issue #18), and cold (a cache miss) too (#31).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._goals import goal

ROOT = Path(__file__).resolve().parents[1]
RUNBOOK = "runbooks/llama-70b-pretrain.yaml"
GOAL_S = 1.5
ROUNDS = 5


CPU: dict[str, list[float]] = {}


def _wall(argv: list[str], env: dict[str, str], name: str) -> float:
    """Wall seconds of one process; its CPU seconds (user + sys) go to CPU[name]: on a busy
    machine the wall time measures the neighbours, the CPU time what an idle one would see."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU.setdefault(name, []).append(cpu)
    return wall


def main() -> None:
    # as an installed `lifeboat` runs (pip compiles its .pyc files): a PYTHONDONTWRITEBYTECODE
    # in the caller's environment would have every run compile Lifeboat's modules again
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base = {**inherited, "PYTHONPATH": str(ROOT), "LIFEBOAT_SKY_HOME": tempfile.mkdtemp(prefix="no-sky-")}
    plan = [sys.executable, "-m", "lifeboat_dr", "plan", RUNBOOK]
    _wall(plan, {**base, "LIFEBOAT_CACHE_DIR": tempfile.mkdtemp(prefix="lifeboat-memo-")}, "warm-up")
    times: dict[str, list[float]] = {"python -c pass": [], "plan (cold)": [], "plan (warm)": []}
    for _ in range(ROUNDS):
        cache = tempfile.mkdtemp(prefix="lifeboat-memo-")
        env = {**base, "LIFEBOAT_CACHE_DIR": cache}
        times["python -c pass"].append(_wall([sys.executable, "-c", "pass"], env, "python -c pass"))
        times["plan (cold)"].append(_wall(plan, env, "plan (cold)"))
        times["plan (warm)"].append(_wall(plan, env, "plan (warm)"))
    bare = statistics.median(times["python -c pass"])
    print(f"oncall plan: {RUNBOOK}, {ROUNDS} interleaved rounds, median wall seconds")
    for name, values in times.items():
        med = statistics.median(values)
        cpu = statistics.median(CPU[name])
        print(
            f"  {name:16} {med:6.2f} s wall (+{med - bare:5.2f} s over python -c pass; "
            f"min {min(values):.2f}), {cpu:5.2f} s CPU"
        )
    load = f"load average {os.getloadavg()[0]:.1f}"
    for name, issue in (("plan (warm)", "#18"), ("plan (cold)", "#31: a cache miss")):
        med = statistics.median(times[name])
        goal(
            f"oncall_plan {name}",
            med <= GOAL_S,
            f"{med:.2f} s wall, {statistics.median(CPU[name]):.2f} s CPU ({load})",
            f"python -c pass {bare:.2f} s",
            f"<= {GOAL_S} s, {issue}",
        )


if __name__ == "__main__":
    main()
