"""Running histories: one from its choices, many from a seed, a failing one shrunk.

`run_history(choices)` builds the world, starts its actors, runs the scheduler to the end
and checks the invariants. `explore(seed, histories)` runs histories `seed`, `seed + 1`, …
(each a `SeededChoices(seed + i)`: `make sim SEED=…` replays one exactly) and gathers
violations and coverage. `shrink(choices, invariant)` looks for a shorter, calmer list
of choices that still violates the same invariant: a prefix, chunks deleted, values
zeroed or halved, each try a full history.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lifeboat_dr.testing.sim import actors
from lifeboat_dr.testing.sim.faults import Coverage
from lifeboat_dr.testing.sim.oracle import Violation
from lifeboat_dr.testing.sim.scheduler import Choices, ListChoices, Scheduler, SeededChoices
from lifeboat_dr.testing.sim.seams import simulated
from lifeboat_dr.testing.sim.world import Run, Scenario, World

INTENSITIES = (0.0, 0.01, 0.03, 0.06, 0.12)  # a history's chance of a fault per request
KEEP = 20  # histories kept per invariant violated (the rest are counted)


@dataclass
class History:
    """One history as it ran."""

    seed: int | None
    choices: list[int]  # every decision, in order: `ListChoices(choices)` replays it
    violations: list[Violation]
    trace: list[tuple[float, str, str]]
    coverage: Coverage
    points: int  # yield points
    virtual_s: float
    wall_s: float
    outcomes: dict[str, str] = field(default_factory=dict)  # run id -> its ledger's outcome
    notes: dict[str, dict[str, str]] = field(default_factory=dict)  # run id -> its ledger's notes
    crashable: set[str] = field(default_factory=set)
    # ground truth, for tests to check a scripted history reached what it is about
    fences: list[tuple[int, str, str]] = field(default_factory=list)  # (epoch, active site, run id)
    jobs: list[tuple[str | None, int | None, str, str | None]] = field(default_factory=list)
    # ^ (run id, attempt, lineage, checkpoint) of every job started
    saves: list[tuple[str, int, bool | None]] = field(default_factory=list)  # (lineage, step, counted)
    script_hits: list[int] = field(default_factory=list)  # requests each scripted fault hit

    @property
    def invariants(self) -> set[str]:
        return {v.invariant for v in self.violations}


def seeded(seed: int, scenario: Scenario | None = None) -> SeededChoices:
    """The choices of history `seed`: its fault intensity drawn first, then everything."""
    rng = random.Random(seed)
    rate = INTENSITIES[rng.randrange(len(INTENSITIES))]
    rates = {
        "fault": rate,
        "fault:primary-trainer": rate / 10,  # a job that dies early leaves no zombie to find
        "fault:resumed-trainer": rate / 10,
        "fault:zombie": rate / 10,
        "fault:failover:ledger": rate / 4,
        "fault:failback:ledger": rate / 4,
        "crash": 0.002 if rate else 0.0,
        "crash:primary-trainer": 0.0005,
        "crash:resumed-trainer": 0.0005,
        "crash:zombie": 0.0005,
        "person": 0.08,
        "param:clock": 0.25,
        "param:throttle": 0.3,
        "param:big_shards": 0.4,
        "actor": 0.35,  # another actor runs first at this yield point
    }
    rates.update(scenario.rates if scenario else {})
    return SeededChoices(rng.randrange(2**63), rates)


def run_history(
    choices: Choices, *, scenario: Scenario | None = None, seed: int | None = None, store_factory=None
) -> History:
    """Run one history to its end and check it. `store_factory(name, clock)` makes each
    site's store (default `MemoryStore(name, clock=clock)`): an out-of-tree backend passes
    its own, which must answer at memory speed and stamp `updated` with `clock` (virtual
    time) to keep a history replayable."""
    started = time.perf_counter()
    sched = Scheduler(choices)
    world = World(sched, scenario, store_factory)
    try:
        with simulated(world):
            _populate(world)
            sched.run()
            if world.broken is not None:
                raise RuntimeError("the simulator's oracle failed (a bug of the simulator)") from world.broken
            world.oracle.finish()
        outcomes, notes = {}, {}
        for run in world.runs.values():
            entry = world.ledger_entry(run)
            outcomes[run.run_id] = entry.outcome if entry is not None else "no ledger"
            notes[run.run_id] = dict(entry.notes) if entry is not None else {}
    finally:
        world.close()
    return History(
        seed=seed,
        choices=list(choices.taken),
        violations=list(world.oracle.violations),
        trace=list(sched.trace),
        coverage=world.coverage,
        points=sched.points,
        virtual_s=sched.now,
        wall_s=time.perf_counter() - started,
        outcomes=outcomes,
        notes=notes,
        crashable=set(world.crashable),
        fences=[(f.epoch, f.active, f.run_id) for f in world.oracle.fences],
        jobs=[(j.run_id, j.attempt, j.lineage, j.checkpoint) for j in world.jobs],
        saves=[(s.lineage, s.step, s.counted) for s in world.oracle.saves],
        script_hits=[world.script_hits.get(i, 0) for i in range(len(world.scenario.script or ()))],
    )


def _populate(world: World) -> None:
    sched = world.sched
    world.trainer, world.start_attempt = actors.trainer, actors.start_attempt
    primary = actors.start_primary(world)
    sched.spawn("outage", "world", lambda: actors.outage(world, primary), at=world.outage_at)
    for i in range(1, world.replicators + 1):
        machine = "cp-a" if world.colocated else f"worker-{i}"
        driver = sched.spawn(
            f"replicate-{i}",
            "schedule",
            lambda i=i, m=machine: actors.replicator(world, i, m),
            at=1.0 + 2 * i,
        )
        driver.machine = machine
    at = world.outage_at + world.failover_after
    _run(world, Run("fo-1", "failover", "cp-a"), at)
    if world.second is not None:  # a second automation's run (a second Prefect server, a person)
        machine = "cp-a" if world.second == "same-worker" else "cp-b"
        _run(world, Run("fo-2", "failover", machine), at + 1.5)
    if world.failback_at is not None:
        _run(world, Run("fb-1", "failback", "cp-a"), world.failback_at)


def _run(world: World, run: Run, at: float) -> None:
    world.runs[run.run_id] = run
    actors.start_attempt(world, run, at)


# -- many histories -------------------------------------------------------------------------------
@dataclass
class Exploration:
    """What a run of many histories found."""

    seed: int
    histories: int = 0
    wall_s: float = 0.0
    points: int = 0
    coverage: Coverage = field(default_factory=Coverage)
    found: dict[str, list[History]] = field(
        default_factory=dict
    )  # invariant -> the first histories violating it
    counts: dict[str, int] = field(default_factory=dict)  # invariant -> histories violating it
    outcomes: dict[str, int] = field(default_factory=dict)  # "fo-1: completed" -> count
    crashable: set[str] = field(default_factory=set)

    @property
    def per_second(self) -> float:
        return self.histories / self.wall_s if self.wall_s else 0.0

    def add(self, history: History) -> None:
        self.histories += 1
        self.points += history.points
        self.coverage.merge(history.coverage)
        self.crashable |= history.crashable
        for run_id, outcome in history.outcomes.items():
            key = f"{run_id}: {outcome}"
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
        for invariant in sorted(history.invariants):
            self.counts[invariant] = self.counts.get(invariant, 0) + 1
            kept = self.found.setdefault(invariant, [])
            if len(kept) < KEEP:
                kept.append(history)

    def merge(self, other: Exploration) -> None:
        self.histories += other.histories
        self.points += other.points
        self.coverage.merge(other.coverage)
        self.crashable |= other.crashable
        for key, n in other.outcomes.items():
            self.outcomes[key] = self.outcomes.get(key, 0) + n
        for invariant, n in other.counts.items():
            self.counts[invariant] = self.counts.get(invariant, 0) + n
            kept = self.found.setdefault(invariant, [])
            kept.extend(other.found[invariant][: KEEP - len(kept)])
            kept.sort(key=lambda h: h.seed)


def explore(
    seed: int,
    histories: int,
    *,
    scenario: Scenario | None = None,
    budget_s: float | None = None,
    stop_on: frozenset[str] = frozenset(),
    progress: Callable[[Exploration], None] | None = None,
) -> Exploration:
    """Run histories `seed` … `seed + histories - 1` (or until `budget_s` wall seconds, or
    until one violates an invariant in `stop_on`)."""
    found = Exploration(seed)
    started = time.perf_counter()
    for i in range(histories):
        history = run_history(seeded(seed + i, scenario), scenario=scenario, seed=seed + i)
        found.add(history)
        found.wall_s = time.perf_counter() - started
        if progress is not None and found.histories % 100 == 0:
            progress(found)
        if history.invariants & stop_on:
            break
        if budget_s is not None and found.wall_s >= budget_s:
            break
    return found


# -- shrinking ----------------------------------------------------------------------------------------
def explore_parallel(seed: int, histories: int, jobs: int, **kw) -> Exploration:
    """`explore` split over `jobs` processes (forked), each a contiguous range of seeds."""
    if jobs <= 1 or histories < 2 * jobs:
        return explore(seed, histories, **kw)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    share = -(-histories // jobs)
    ranges = [(seed + i * share, min(share, histories - i * share)) for i in range(jobs)]
    kw.pop("progress", None)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        parts = list(pool.map(_explore_range, ranges, [kw] * len(ranges)))
    found = Exploration(seed)
    for part in parts:
        found.merge(part)
    found.wall_s = time.perf_counter() - started
    return found


def _explore_range(span: tuple[int, int], kw: dict) -> Exploration:
    return explore(span[0], span[1], **kw)


def parse_schedule(text: str) -> list[int]:
    """A schedule as printed: dense (`0,3,0,1`) or sparse (`1:3,3:1`: position:value, the rest 0)."""
    text = text.replace(" ", "").strip(",")
    if not text:
        return []
    if ":" not in text:
        return [int(v) for v in text.split(",")]
    pairs = [tuple(int(x) for x in item.split(":", 1)) for item in text.split(",")]
    values = [0] * (max(p for p, _ in pairs) + 1)
    for position, value in pairs:
        values[position] = value
    return values


def format_schedule(values: list[int]) -> str:
    """The sparse form of `parse_schedule`."""
    return ",".join(f"{i}:{v}" for i, v in enumerate(values) if v) or "0"


def still_fails(invariant: str, scenario: Scenario | None = None) -> Callable[[list[int]], History | None]:
    def check(values: list[int]) -> History | None:
        history = run_history(ListChoices(values), scenario=scenario)
        return history if invariant in history.invariants else None

    return check


def shrink(
    values: list[int],
    fails: Callable[[list[int]], History | None],
    *,
    budget_s: float = 90.0,
    max_tries: int = 600,
) -> tuple[list[int], History | None]:
    """A smaller list for which `fails` still holds (its history returned)."""
    deadline = time.perf_counter() + budget_s
    tries = 0
    best = _trim(values)
    last = fails(best)
    if last is None:
        return values, None

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, last, tries
        candidate = _trim(candidate)
        if candidate == best or time.perf_counter() > deadline or tries >= max_tries:
            return False
        tries += 1
        got = fails(candidate)
        if got is not None:
            best, last = candidate, got
            return True
        return False

    def zeroed(lo: int, hi: int) -> list[int]:
        return best[:lo] + [0] * (hi - lo) + best[hi:]

    improved = True
    while improved and time.perf_counter() < deadline and tries < max_tries:
        improved = False
        length = len(best)  # a shorter prefix: the rest of the history all plain
        while length > 1 and attempt(best[: length // 2]):
            length = len(best)
            improved = True
        size = max(1, len(best) // 2)  # zero blocks, then single choices: positions keep their meaning
        while size >= 1:
            for lo in range(0, len(best), size):
                if any(best[lo : lo + size]) and attempt(zeroed(lo, min(len(best), lo + size))):
                    improved = True
            size //= 2
        size = max(1, len(best) // 4)  # delete chunks: later choices move up
        while size >= 1:
            i = 0
            while i < len(best):
                if attempt(best[:i] + best[i + size :]):
                    improved = True
                else:
                    i += size
            size //= 2
        for i in range(len(best)):  # calmer values: halve what is left
            if i < len(best) and best[i] > 1 and attempt(best[:i] + [best[i] // 2] + best[i + 1 :]):
                improved = True
    return best, last


def _trim(values: Iterable[int]) -> list[int]:
    values = list(values)
    while values and values[-1] == 0:
        values.pop()
    return values


# -- reporting ----------------------------------------------------------------------------------------
def commit() -> str:
    """The code's commit (and whether the tree has changes), or the package's version."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"lifeboat-dr {version('lifeboat-dr')} (no git checkout)"
        except PackageNotFoundError:
            return "unknown"


def schedule_lines(history: History) -> list[str]:
    return [f"  t={at:8.2f}s  {actor}: {what}" for at, actor, what in history.trace]


def describe(invariant: str, history: History, shrunk: History | None, values: list[int] | None) -> str:
    first = next(v for v in history.violations if v.invariant == invariant)
    lines = [
        f"VIOLATION {first.line()}",
        f"  seed {history.seed}, commit {commit()}",
        f"  replay the history: make sim SEED={history.seed}" if history.seed is not None else "",
    ]
    if shrunk is not None and values is not None:
        shown = next(v for v in shrunk.violations if v.invariant == invariant)
        lines += [
            f"  shrunk to {sum(1 for v in values if v)} non-zero of {len(values)} choices "
            f"({sum(1 for v in history.choices if v)} of {len(history.choices)} before): "
            f"make sim SCHEDULE={format_schedule(values)}",
            f"  shrunk: {shown.line()}",
            "  schedule (decisions that are not the plain one, faults, violations):",
            *schedule_lines(shrunk),
        ]
    return "\n".join(line for line in lines if line)


def coverage_table(coverage: Coverage, crashable: set[str]) -> list[str]:
    """One line per (actor kind, step): each fault it can meet, with how often it did
    (0: possible, never reached)."""
    from lifeboat_dr.testing.sim.faults import ALL_FAULTS

    possible = coverage.possible(crashable)
    lines = ["actor/step".ljust(34) + "".join(f.rjust(11) for f in ALL_FAULTS)]
    for kind, phase in sorted(possible):
        cells = []
        for fault in ALL_FAULTS:
            if fault not in possible[(kind, phase)]:
                cells.append("-".rjust(11))
            else:
                cells.append(str(coverage.met.get((fault, kind, phase), 0)).rjust(11))
        lines.append(f"{kind}/{phase}".ljust(34) + "".join(cells))
    return lines


def reach(coverage: Coverage, crashable: set[str]) -> tuple[int, int]:
    """(fault × actor × step triples reached, those possible)."""
    possible = coverage.possible(crashable)
    total = sum(len(f) for f in possible.values())
    met = sum(1 for (fault, kind, phase) in coverage.met if fault in possible.get((kind, phase), ()))
    return met, total
