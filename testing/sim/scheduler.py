"""The seeded scheduler: every actor is a thread, and exactly one of them runs at a time.

An actor runs until it reaches a *yield point* — a store or compute request, a sleep, a
wait on another actor — and there the scheduler decides, from the history's `Choices`,
which runnable actor goes next. Nothing else decides: the threads never race, so one
list of choices is one history, replayed exactly, and a shorter list of smaller numbers
is a simpler history (what the shrinker looks for).

Time is virtual: `now` (seconds since the history's start) moves by each request's
latency, and when every actor sleeps it jumps to the first one due. An actor belongs to
a `Process` (a flow run, a job); killing the process is a SIGKILL: each of its actors
raises `Killed` at its next yield point, and since every effect passes one, nothing it
does afterwards lands — not its `finally` blocks, not its error handlers' writes.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

BASE = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)  # virtual time 0 on every true clock


class Killed(BaseException):  # noqa: N818 - a signal, not an error: most handlers must not catch it
    """The actor's process was killed; raised at its next yield point."""


class Hung(Exception):  # noqa: N818
    """Every live actor waits on something that no other actor can bring about."""


# -- choices ---------------------------------------------------------------------------------
class Choices:
    """The history's decisions, in order. `pick(kind, n)` is in range(n); 0 is always the
    plain choice (no fault, the first candidate), so a list of zeros is the calmest history.
    `taken` is every value returned, the exact replay of this history."""

    def __init__(self) -> None:
        self.taken: list[int] = []

    def pick(self, kind: str, n: int) -> int:
        if n <= 1:
            return 0  # no choice: nothing recorded, nothing consumed
        value = self._next(kind, n)
        self.taken.append(value)
        return value

    def _next(self, kind: str, n: int) -> int:
        raise NotImplementedError


class SeededChoices(Choices):
    """Choices from a seed. `rates` maps a kind's prefix to the chance of a non-zero
    choice (a fault is rare; which actor runs next is not): the rates shape what the seed
    explores, the recorded values are what replays."""

    def __init__(self, seed: int, rates: dict[str, float] | None = None):
        super().__init__()
        self.rng = random.Random(seed)
        self.rates = rates or {}
        self._rates: dict[str, float | None] = {}

    def _rate(self, kind: str) -> float | None:
        """The rate of the longest `:`-separated prefix of `kind` that has one."""
        if kind in self._rates:
            return self._rates[kind]
        parts, rate = kind.split(":"), None
        for end in range(len(parts), 0, -1):
            rate = self.rates.get(":".join(parts[:end]))
            if rate is not None:
                break
        self._rates[kind] = rate
        return rate

    def _next(self, kind: str, n: int) -> int:
        rate = self._rate(kind)
        if rate is not None and self.rng.random() >= rate:
            return 0
        return self.rng.randrange(1, n) if rate is not None else self.rng.randrange(n)


class ListChoices(Choices):
    """Replay a list of choices (a shrunk schedule, or one Hypothesis drew); past its end
    every choice is 0. A value at or above `n` is taken modulo `n`."""

    def __init__(self, values: list[int]):
        super().__init__()
        self.values, self.position = list(values), 0

    def _next(self, kind: str, n: int) -> int:
        value = self.values[self.position] if self.position < len(self.values) else 0
        self.position += 1
        return value % n


# -- actors ----------------------------------------------------------------------------------
@dataclass
class Process:
    """What is killed together: a flow run with its step threads, a job."""

    name: str
    killed: bool = False
    killed_at: float = 0.0
    actors: list[Actor] = field(default_factory=list)


class ActorClock:
    """An actor's wall clock: true virtual time, skewed by `skew_s`, stepped by `jump_s`
    from `jump_at` on (an NTP step). `monotonic()` is virtual time, never skewed."""

    def __init__(
        self, sched: Scheduler, skew_s: float = 0.0, jump_at: float | None = None, jump_s: float = 0.0
    ):
        self.sched, self.skew_s, self.jump_at, self.jump_s = sched, skew_s, jump_at, jump_s

    def offset(self) -> float:
        jumped = self.jump_at is not None and self.sched.now >= self.jump_at
        return self.skew_s + (self.jump_s if jumped else 0.0)

    def __call__(self) -> datetime:
        return BASE + timedelta(seconds=self.sched.now + self.offset())

    def monotonic(self) -> float:
        return self.sched.now


class Actor:
    """One thread of the history. `kind` names its role in the report (trainer,
    replicator, failover, ...), `phase` what it is doing now (a failover step's name)."""

    def __init__(self, sched: Scheduler, name: str, kind: str, fn: Callable[[], object], process: Process):
        self.sched, self.name, self.kind, self.fn, self.process = sched, name, kind, fn, process
        self.phase = "start"
        self.machine = name  # whose local files it sees (the ledger): set by the world
        self.clock = ActorClock(sched)
        self.wake = sched.now
        self.cond: Callable[[], bool] | None = None
        self.deadline: float | None = None
        self.done = False
        self.started = False
        self.result: object = None
        self.error: BaseException | None = None  # what it died of (its __traceback__ kept)
        self.killed = False  # it ended by Killed
        self._worker: _Worker | None = None  # the thread it runs on, once started

    def runnable(self, now: float) -> bool:
        if self.process.killed:
            return True  # it must unwind
        if self.cond is not None:
            return self.cond() or (self.deadline is not None and now >= self.deadline)
        return self.wake <= now

    def _body(self) -> None:
        """Run the actor on its worker's thread; at the end hand the turn on."""
        sched = self.sched
        try:
            if self.process.killed:
                raise Killed
            self.result = self.fn()
        except Killed:
            self.killed = True
        except BaseException as e:  # noqa: BLE001 - the world judges what an actor died of
            self.error = e
        sched._finish(self)

    def _wait_turn(self) -> None:
        self._worker.sem.acquire()

    def _give_turn(self) -> None:
        self._worker.sem.release()

    def __repr__(self) -> str:
        return f"<actor {self.name} ({self.kind}/{self.phase})>"


class _Worker:
    """A thread that runs actors one after another (starting a thread per actor costs more
    than running it): idle workers wait in `_IDLE`."""

    def __init__(self) -> None:
        self.sem = threading.Semaphore(0)
        self.actor: Actor | None = None
        threading.Thread(target=self._loop, name="sim-worker", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.sem.acquire()
            self.actor._body()


_IDLE: list[_Worker] = []
_IDLE_LOCK = threading.Lock()


def _forget_workers() -> None:  # a forked child has none of its parent's threads
    global _IDLE_LOCK
    _IDLE.clear()
    _IDLE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)


def _worker_for(actor: Actor) -> _Worker:
    with _IDLE_LOCK:
        worker = _IDLE.pop() if _IDLE else None
    worker = worker or _Worker()
    worker.actor, actor._worker = actor, worker
    return worker


def _idle(worker: _Worker) -> None:
    with _IDLE_LOCK:
        _IDLE.append(worker)


class Scheduler:
    """Runs one history's actors, one at a time, every decision from `choices`."""

    def __init__(self, choices: Choices, *, horizon: float = 3600.0, max_points: int = 100_000):
        self.choices = choices
        self.now = 0.0
        self.horizon, self.max_points = horizon, max_points
        self.points = 0
        self.actors: list[Actor] = []
        self.live: list[Actor] = []
        self.current: Actor | None = None
        self.hung: list[str] = []  # the actors that waited forever, when the history hung
        self.on_switch: Callable[[Actor], None] | None = None
        self.trace: list[tuple[float, str, str]] = []  # (time, actor, what): switches and decisions
        self._main = threading.Semaphore(0)
        self._over = False

    # -- building the history --------------------------------------------------------------
    def spawn(
        self,
        name: str,
        kind: str,
        fn: Callable[[], object],
        *,
        process: Process | None = None,
        at: float | None = None,
    ) -> Actor:
        """A new actor, runnable from `at` (default now), in `process` (default its own)."""
        process = process or Process(name)
        actor = Actor(self, name, kind, fn, process)
        actor.wake = self.now if at is None else at
        process.actors.append(actor)
        self.actors.append(actor)
        self.live.append(actor)
        return actor

    def run(self) -> None:
        """Run the history to its end (every actor done). Called by the main thread."""
        first = self._choose()
        if first is not None:
            self._hand(first)
            self._main.acquire()

    # -- what actors call ------------------------------------------------------------------
    def point(self, what: str) -> None:
        """A yield point of the current actor: maybe another runs first."""
        me = self.current
        if me is None:
            return
        if me.process.killed:
            raise Killed
        self.points += 1
        self._switch(me)

    def sleep(self, seconds: float) -> None:
        me = self.current
        if me is None:
            return
        me.wake = self.now + max(0.0, seconds)
        self._switch(me)

    def wait_until(self, cond: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block the current actor until `cond()` holds (or `timeout` virtual seconds)."""
        me = self.current
        if me is None or cond():
            return cond()
        me.cond, me.deadline = cond, (None if timeout is None else self.now + timeout)
        try:
            self._switch(me)
        finally:
            me.cond = me.deadline = None
        return cond()

    def advance(self, seconds: float) -> None:
        """Time a request takes (the actor keeps its turn)."""
        self.now += seconds

    def kill(self, process: Process) -> None:
        if not process.killed:
            process.killed, process.killed_at = True, self.now

    def decide(self, kind: str, n: int) -> int:
        value = self.choices.pick(kind, n)
        if value and not kind.startswith(("fault", "crash", "actor")):  # those are noted with their meaning
            self.note(f"{kind} = {value}")
        return value

    def note(self, what: str) -> None:
        actor = self.current.name if self.current else "-"
        self.trace.append((self.now, actor, what))

    # -- switching -------------------------------------------------------------------------
    def _switch(self, me: Actor) -> None:
        nxt = self._choose()
        if nxt is not me:
            self._hand(nxt)
            me._wait_turn()
        if me.process.killed:
            raise Killed

    def _choose(self) -> Actor | None:
        """The next actor to run; advances time when every actor sleeps; None: the end."""
        while True:
            if not self.live:
                return None
            if not self._over and (self.now > self.horizon or self.points > self.max_points):
                self._over = True
                for actor in self.live:
                    self.kill(actor.process)
            dying = [a for a in self.live if a.process.killed]
            if dying:
                return dying[0]
            ready = [a for a in self.live if a.runnable(self.now)]
            me = self.current
            if me is not None and len(ready) > 1 and me in ready and ready[0] is not me:
                ready.remove(me)  # the plain choice (0) lets the running actor go on
                ready.insert(0, me)
            if len(ready) == 1:
                return ready[0]
            if ready:
                picked = ready[self.decide("actor", len(ready))]
                if picked is not ready[0]:
                    self.note(f"{picked.name} goes before {ready[0].name}")
                return picked
            due = [a.wake for a in self.live if a.cond is None and a.wake > self.now]
            due += [a.deadline for a in self.live if a.cond is not None and a.deadline is not None]
            if not due:  # everyone waits on a condition nobody can change
                self.hung = [a.name for a in self.live]
                for actor in self.live:
                    self.kill(actor.process)
                continue
            self.now = max(self.now, min(due))

    def _hand(self, nxt: Actor | None) -> None:
        if nxt is None:
            self.current = None
            self._main.release()
            return
        prev = self.current
        self.current = nxt
        if prev is not nxt and self.on_switch is not None:
            self.on_switch(nxt)
        if not nxt.started:
            nxt.started = True
            _worker_for(nxt)
        nxt._give_turn()

    def _finish(self, me: Actor) -> None:
        me.done = True
        self.live.remove(me)
        _idle(me._worker)  # before the hand-over: the next actor may take this very thread
        self._hand(self._choose())
