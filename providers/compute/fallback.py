"""Derived behaviour written once over the `Compute` primitives: ordered fallback through the
runbook's candidates with a bounded budget, and teardown that cannot be forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from lifeboat_dr.kernel.errors import LifeboatError, ProviderUnavailable
from lifeboat_dr.providers.compute.base import (
    ClusterState,
    Compute,
    JobSpec,
    JobTimeout,
    LaunchAttempt,
    LaunchResult,
    PlanOption,
    wait_for,
)


class FallbackExhausted(LifeboatError):
    """Every candidate failed or the budget ran out; `attempts` says what was tried."""

    def __init__(self, message: str, attempts: Sequence[LaunchAttempt]):
        super().__init__(message)
        self.attempts = tuple(attempts)


def launch_with_fallback(
    compute: Compute,
    cluster: str,
    options: Sequence[PlanOption],
    job: JobSpec | None = None,
    *,
    budget_s: float = 1800.0,
    max_attempts: int | None = None,
    boot_timeout_s: float = 900.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 1.0,
) -> LaunchResult:
    """Try the feasible `options` in order until one is up (with `job` started on it, or
    idle when `job` is None: provisioning ahead of approval; `run` starts the job later).

    A capacity error, another retryable provider error, or a boot slower than
    `boot_timeout_s` moves on to the next option after tearing down whatever the try left.
    The whole search stops at `budget_s` (wall time) or `max_attempts`; every try is
    recorded. Permanent errors (a bad task, a config mistake) are not retried: they
    propagate after teardown, since the next region would fail the same way."""
    attempts: list[LaunchAttempt] = []
    start = clock()
    feasible = [o for o in options if o.feasible]
    if not feasible:
        raise FallbackExhausted("no feasible candidate to launch on", attempts)
    for option in feasible:
        if max_attempts is not None and len(attempts) >= max_attempts:
            break
        if clock() - start >= budget_s:
            break
        t0 = clock()
        try:
            status = compute.launch(cluster, option, job)
            if status.state is ClusterState.PROVISIONING:
                left = max(0.0, min(boot_timeout_s, budget_s - (clock() - start)))
                status = wait_for(
                    compute,
                    cluster,
                    lambda s: s.state is not ClusterState.PROVISIONING,
                    timeout=left,
                    clock=clock,
                    sleep=sleep,
                    poll=poll_s,
                )
            if status.state is not ClusterState.UP:
                raise ProviderUnavailable(f"{option.infra}: cluster {status.state} right after launch")
        except (ProviderUnavailable, JobTimeout) as e:
            attempts.append(LaunchAttempt(option, False, clock() - t0, f"{type(e).__name__}: {e}"))
            compute.teardown(cluster)
            continue
        except BaseException:
            compute.teardown(cluster)
            raise
        attempts.append(LaunchAttempt(option, True, clock() - t0))
        return LaunchResult(cluster=status, attempts=tuple(attempts))
    spent = clock() - start
    raise FallbackExhausted(
        f"no capacity after {len(attempts)} attempt(s) in {spent:.0f}s: "
        + "; ".join(f"{a.option.infra}: {a.error}" for a in attempts),
        attempts,
    )


@contextmanager
def torn_down(compute: Compute, cluster: str, *, always: bool = False) -> Iterator[None]:
    """Tear `cluster` down if the block fails (or always: drills). Teardown errors never
    hide the block's own error."""
    ok = False
    try:
        yield
        ok = True
    finally:
        if always or not ok:
            try:
                compute.teardown(cluster)
            except Exception:
                if ok:
                    raise
