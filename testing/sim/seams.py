"""Where the simulator takes over what the core does not take as a parameter.

The core takes its clocks and stores as arguments nearly everywhere (the actors pass
them). What it does not take, and the simulator replaces for the length of a history:

| module              | what                    | in the simulation                               |
|---------------------|-------------------------|-------------------------------------------------|
| core.transfer       | ThreadPoolExecutor      | inline, in order (the copying actor's own turn) |
| core.certify        | ThreadPoolExecutor      | inline, in order                                |
| core.checkpoints.receipt | ThreadPoolExecutor | inline, in order                                |
| core.ledger         | ThreadPoolExecutor      | the write-behind thread: a scheduled actor of the same process; its futures wait on the scheduler |
| core.failover.walk  | concurrent.futures.wait | waits on the scheduler (virtual timeout)        |
| core.failover.walk  | time                    | virtual monotonic time (step timeouts)          |
| core.transfer       | time, random, RetryPolicy's sleep | virtual time, a seeded jitter, a virtual sleep |
| core.lock           | threading (the renewer) | the lock's renewer: a scheduled actor of the holder's process; its stop event waits on the scheduler |

And one hazard of Python 3.11 itself: `functools.cached_property` holds a lock (one per
property, shared by every instance) while it computes; a computation that makes a request
yields with it held, and the next actor reading the property would block the thread the
scheduler waits on. For a history each such lock in the core is a `SchedulerLock`: an
actor that finds it taken waits on the scheduler, as a thread would on the lock.

`check()` says which of these no longer exist (a refactor renamed one): the simulator then
fails loudly instead of silently running a thread it does not schedule.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import logging
import random
import sys
import types
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from lifeboat_dr.testing.sim.scheduler import BASE, Killed

SEAMS = (
    ("lifeboat_dr.core.transfer", "ThreadPoolExecutor"),
    ("lifeboat_dr.core.transfer", "time"),
    ("lifeboat_dr.core.transfer", "random"),
    ("lifeboat_dr.core.transfer", "RetryPolicy"),
    ("lifeboat_dr.core.certify", "ThreadPoolExecutor"),
    ("lifeboat_dr.core.checkpoints.receipt", "ThreadPoolExecutor"),
    ("lifeboat_dr.core.ledger", "ThreadPoolExecutor"),
    ("lifeboat_dr.core.failover.walk", "concurrent"),
    ("lifeboat_dr.core.failover.walk", "time"),
    ("lifeboat_dr.core.lock", "threading"),
)


def check() -> list[str]:
    """The seams that are missing from the code (each a `module.name`)."""
    missing = []
    for module, name in SEAMS:
        if not hasattr(importlib.import_module(module), name):
            missing.append(f"{module}.{name}")
    return missing


class InlineExecutor:
    """A ThreadPoolExecutor that runs each call at once, in order, on the caller's thread."""

    def __init__(self, max_workers=None, thread_name_prefix: str = "", **_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Killed:
            raise
        except BaseException as e:  # noqa: BLE001 - as a pool would keep it
            future.set_exception(e)
        return future

    def map(self, fn, *iterables) -> Iterator:
        return iter([fn(*args) for args in zip(*iterables, strict=False)])

    def shutdown(self, wait: bool = True, **_) -> None:
        return None


class SimFuture(Future):
    """A future whose `result()` waits on the scheduler, not on the thread."""

    def __init__(self, sched):
        super().__init__()
        self._sched = sched

    def result(self, timeout=None):
        if not self.done():
            self._sched.wait_until(self.done)
        return super().result(0)

    def exception(self, timeout=None):
        if not self.done():
            self._sched.wait_until(self.done)
        return super().exception(0)


class TaskExecutor:
    """The ledger's writer thread: each submitted call is an actor of the caller's process,
    run after the one before it (a single writer keeps order), when the scheduler says."""

    def __init__(self, world, max_workers=None, thread_name_prefix: str = "", **_):
        self.world, self.last = world, None

    def submit(self, fn, *args, **kwargs) -> Future:
        sched = self.world.sched
        parent = sched.current
        if parent is None:
            return InlineExecutor().submit(fn, *args, **kwargs)
        future, before = SimFuture(sched), self.last
        self.last = future

        def body() -> None:
            if before is not None:
                sched.wait_until(before.done)
            try:
                future.set_result(fn(*args, **kwargs))
            except Killed:
                raise
            except BaseException as e:  # noqa: BLE001 - the caller reads it from the future
                future.set_exception(e)

        child = sched.spawn(f"{parent.name}/ledger-writer", parent.kind, body, process=parent.process)
        inherit(child, parent, "ledger")
        return future

    def shutdown(self, wait: bool = True, **_) -> None:
        return None


def inherit(child, parent, phase: str) -> None:
    """A thread of the same process: same machine, clock, run and region."""
    child.phase, child.machine, child.clock = phase, parent.machine, parent.clock
    for name in ("run", "attempt", "region"):
        if hasattr(parent, name):
            setattr(child, name, getattr(parent, name))


class SimEvent:
    """`threading.Event` whose `wait` waits on the scheduler (virtual timeout)."""

    def __init__(self, world):
        self.world, self.flag = world, False

    def set(self) -> None:
        self.flag = True

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        return self.world.sched.wait_until(self.is_set, timeout)


class SimThread:
    """`threading.Thread` started as an actor of the starter's process (a thread dies with
    its process); `join` waits on the scheduler."""

    def __init__(self, world, target=None, name: str = "thread", daemon=None, args=(), kwargs=None):
        self.world, self.target, self.name = world, target, name
        self.args, self.kwargs = args, kwargs or {}
        self.actor = None

    def start(self) -> None:
        sched = self.world.sched
        parent = sched.current
        self.actor = sched.spawn(
            f"{parent.name}/{self.name}",
            parent.kind,
            lambda: self.target(*self.args, **self.kwargs),
            process=parent.process,
        )
        inherit(self.actor, parent, self.name.split("-")[0])

    def join(self, timeout: float | None = None) -> None:
        if self.actor is not None:
            self.world.sched.wait_until(lambda: self.actor.done, timeout)

    def is_alive(self) -> bool:
        return self.actor is not None and not self.actor.done


class SimTime:
    """The `time` module as a simulated actor sees it."""

    def __init__(self, world):
        self.world = world

    def monotonic(self) -> float:
        return self.world.sched.now

    def time(self) -> float:
        return BASE.timestamp() + self.world.sched.now

    def sleep(self, seconds: float) -> None:
        self.world.sched.sleep(seconds)


class SchedulerLock:
    """A re-entrant lock whose waiters wait on the scheduler (see the module docstring)."""

    def __init__(self, world):
        self.world, self.owner, self.depth = world, None, 0

    def __enter__(self):
        me = self.world.sched.current
        if self.owner is not None and self.owner is not me:
            self.world.sched.wait_until(lambda: self.owner is None)
        self.owner = me
        self.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if not self.depth:
            self.owner = None


_PROPERTIES: dict[int, list[functools.cached_property]] = {}  # by how many modules were loaded


def _cached_properties() -> list[functools.cached_property]:
    """Every `cached_property` with a lock (Python 3.11) on a class of the loaded core."""
    if len(sys.modules) in _PROPERTIES:
        return _PROPERTIES[len(sys.modules)]
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("lifeboat_dr.") or name.startswith("lifeboat_dr.testing"):
            continue
        for cls in list(vars(module).values()):
            if isinstance(cls, type) and cls.__module__ == name:
                found += [
                    v
                    for v in vars(cls).values()
                    if isinstance(v, functools.cached_property) and hasattr(v, "lock")
                ]
    _PROPERTIES.clear()
    _PROPERTIES[len(sys.modules)] = found
    return found


def _wait(world, fs, timeout=None, return_when="ALL_COMPLETED"):
    fs = list(fs)

    def ready() -> bool:
        done = sum(f.done() for f in fs)
        return done > 0 if return_when == "FIRST_COMPLETED" else done == len(fs)

    world.sched.wait_until(ready, timeout)
    done = {f for f in fs if f.done()}
    return concurrent.futures._base.DoneAndNotDoneFutures(done, set(fs) - done)


@contextmanager
def simulated(world):
    """Patch every seam for one history; restore them after."""
    missing = check()
    if missing:
        raise RuntimeError(f"the simulator's seams are gone (renamed?): {', '.join(missing)}")
    from lifeboat_dr.core import transfer

    clock = SimTime(world)
    futures = types.SimpleNamespace(
        wait=functools.partial(_wait, world),
        Future=Future,
        FIRST_COMPLETED=concurrent.futures.FIRST_COMPLETED,
        ALL_COMPLETED=concurrent.futures.ALL_COMPLETED,
        ThreadPoolExecutor=InlineExecutor,
    )
    replacements = {
        ("lifeboat_dr.core.transfer", "ThreadPoolExecutor"): InlineExecutor,
        ("lifeboat_dr.core.transfer", "time"): clock,
        ("lifeboat_dr.core.transfer", "random"): random.Random(0),
        ("lifeboat_dr.core.transfer", "RetryPolicy"): functools.partial(
            transfer.RetryPolicy, sleep=clock.sleep
        ),
        ("lifeboat_dr.core.certify", "ThreadPoolExecutor"): InlineExecutor,
        ("lifeboat_dr.core.checkpoints.receipt", "ThreadPoolExecutor"): InlineExecutor,
        ("lifeboat_dr.core.ledger", "ThreadPoolExecutor"): functools.partial(TaskExecutor, world),
        ("lifeboat_dr.core.failover.walk", "concurrent"): types.SimpleNamespace(futures=futures),
        ("lifeboat_dr.core.failover.walk", "time"): clock,
        ("lifeboat_dr.core.lock", "threading"): types.SimpleNamespace(
            Thread=functools.partial(SimThread, world), Event=functools.partial(SimEvent, world)
        ),
    }
    saved = {}
    locks = [(prop, prop.lock) for prop in _cached_properties()]
    quiet = logging.getLogger("lifeboat")  # a history's warnings (a lock reclaimed) are its trace's
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for (module, name), value in replacements.items():
            mod = importlib.import_module(module)
            saved[(module, name)] = getattr(mod, name)
            setattr(mod, name, value)
        for prop, _ in locks:
            prop.lock = SchedulerLock(world)
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(importlib.import_module(module), name, value)
        for prop, lock in locks:
            prop.lock = lock
        quiet.setLevel(level)
