"""Watch the standby after a switch: error rate and P99 over a sliding window of requests.

`watch()` sends one probe request per interval for a duration and stops at the first breach.
It judges a full window (`window` requests), or earlier when the errors already seen in a
partial window exceed what a full one may hold: a dead standby is reverted after a few
requests, not after a whole window. Clock and sleep are injected, so tests run instantly.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from lifeboat_dr.providers.serving.base import Answer


@dataclass(frozen=True)
class Thresholds:
    window: int  # requests judged together
    max_error_rate: float  # share of failed requests that breaches
    max_p99_s: float  # 99th-percentile latency that breaches


@dataclass(frozen=True)
class WatchResult:
    requests: int
    breach: str | None  # why traffic must revert; None: the standby held
    error_rate: float  # of the last window
    p99_s: float | None  # of the last window (None: never full)


def p99(latencies: list[float]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(latencies)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def judge(window: deque[Answer], t: Thresholds) -> str | None:
    errors = sum(not a.ok for a in window)
    if errors > t.max_error_rate * t.window:
        return f"error rate {errors}/{len(window)} requests, threshold {t.max_error_rate:.1%} of {t.window}"
    if len(window) >= t.window:
        worst = p99([a.latency_s for a in window])
        if worst > t.max_p99_s:
            return f"P99 {worst * 1000:.0f} ms over {len(window)} requests, threshold {t.max_p99_s * 1000:.0f} ms"
    return None


def watch(
    probe: Callable[[], Answer],
    thresholds: Thresholds,
    *,
    duration_s: float,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WatchResult:
    """Probe for `duration_s`; return at the first breach or when the time is up."""
    window: deque[Answer] = deque(maxlen=thresholds.window)
    end, n = clock() + duration_s, 0
    while True:
        window.append(probe())
        n += 1
        breach = judge(window, thresholds)
        if breach or clock() >= end:
            break
        sleep(interval_s)
    rate = sum(not a.ok for a in window) / len(window)
    full = len(window) >= thresholds.window
    return WatchResult(n, breach, rate, p99([a.latency_s for a in window]) if full else None)
