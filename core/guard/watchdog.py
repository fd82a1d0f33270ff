"""The watchdog: a step that runs past a multiple of the recent median is a hang.

A silent NCCL hang raises nothing: every live rank waits in a collective for a peer that
never comes (a stopped process, a dead link), for as long as the collective's own timeout
(NCCL's default is ten minutes, gloo's thirty). The watchdog measures each step (from the
guard's `step()` entering to leaving) and keeps the last `window` durations; a step still
running after `bound()` seconds is a hang:

    bound = max(multiple * median(recent steps), floor_s)     once `warmup` steps are measured
    bound = first_s                                           before (compile, warm-up, loading)

`multiple` is the runbook's (`job.guard.hang_multiple`, `$LIFEBOAT_HANG_MULTIPLE`); `floor_s`
keeps a job of millisecond steps on shared CPUs from calling scheduling noise a hang. The
thread looks every `poll_s`, so a hang is noticed within `bound + poll_s` of its step's start.
A periodic checkpoint save is watched the same way with a rule of its own (saves against
saves: a save is no step), since a rank stopped in a save stalls the others in its barrier.
`HangRule` is the arithmetic (a plain value, tested on its own); `StepWatchdog` the thread.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class HangRule:
    multiple: float = 10.0
    floor_s: float = 5.0
    first_s: float = 300.0
    warmup: int = 3
    window: int = 20
    _recent: deque = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.multiple <= 1 or self.floor_s <= 0 or self.first_s <= 0:
            raise ValueError(f"hang rule needs multiple > 1 and positive bounds, not {self}")
        self._recent = deque(maxlen=self.window)

    def record(self, seconds: float) -> None:
        self._recent.append(seconds)

    def median(self) -> float | None:
        return statistics.median(self._recent) if self._recent else None

    def warmed(self) -> bool:
        """Whether `warmup` spans are measured: the bound is the median's, not `first_s`."""
        return len(self._recent) >= self.warmup

    def bound(self) -> float:
        """Seconds a step may take before it is a hang."""
        if not self.warmed():
            return self.first_s
        return max(self.multiple * statistics.median(self._recent), self.floor_s)


OnHang = Callable[[int, float, float], None]  # (step, seconds it has run, the bound it passed)


class StepWatchdog:
    """A daemon thread calling `on_hang(step, elapsed, bound)` once, from the watchdog
    thread, when the span begun by `begin(step)` is not `end()`ed within its rule's bound
    (the watchdog's rule, or the one `begin` was given: a checkpoint save has its own).
    `on_hang` is expected to end the process (the guard's does: `os._exit`)."""

    def __init__(
        self,
        rule: HangRule,
        on_hang: OnHang,
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = 0.1,
    ):
        self.rule, self.on_hang, self.clock, self.poll_s = rule, on_hang, clock, poll_s
        self._lock = threading.Lock()
        self._running: tuple[int, float, float, HangRule] | None = None  # step, started, bound, rule
        self._stop = threading.Event()
        self._fired = False
        self._thread = threading.Thread(target=self._watch, name="lifeboat-guard-watchdog", daemon=True)

    def start(self) -> StepWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.poll_s + 1)

    def begin(self, step: int, rule: HangRule | None = None) -> None:
        """Watch `step` (a step, or with `rule` another span, e.g. its checkpoint save)."""
        rule = rule or self.rule
        with self._lock:
            self._running = (step, self.clock(), rule.bound(), rule)

    def end(self) -> float:
        """Close the running span and count it in its rule; its duration."""
        with self._lock:
            _, started, _, rule = self._running
            self._running = None
        seconds = self.clock() - started
        rule.record(seconds)
        return seconds

    def pause(self) -> None:
        """Leave the running step unmeasured and unwatched (it raised: the guard handles it)."""
        with self._lock:
            self._running = None

    def check(self) -> bool:
        """One look (the thread's loop body; tests call it with a fake clock): fires
        `on_hang` at most once. Whether it fired."""
        with self._lock:
            running = self._running
        if running is None or self._fired:
            return False
        step, started, bound, _ = running
        elapsed = self.clock() - started
        if elapsed <= bound:
            return False
        self._fired = True
        self.on_hang(step, elapsed, bound)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()
