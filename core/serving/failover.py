"""The realtime-serving failover: verify the hot standby, move traffic, watch, revert if needed.

Walks `lifeboat_dr.core.serving.steps.SERVING_STEPS` in order, marking each milestone in the ledger
(kind "serving"). Plain Python over interfaces: a `TrafficRouter`, the standby's
`ModelEndpoint`, the expected weights digest (a callable, so the certification of the
weights is timed as part of "verify"), an optional approval callable. Every outcome is
recorded, never raised: a standby that fails verification leaves traffic where it was
(outcome `failed`); a breach while watching puts the weights back as they were before the
switch (outcome `reverted`) and says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from lifeboat_dr.core.ledger import LedgerEntry, RtoLedger
from lifeboat_dr.core.serving.verify import verify_standby
from lifeboat_dr.core.serving.watch import Thresholds, WatchResult, watch
from lifeboat_dr.providers.serving.base import Answer, ModelEndpoint
from lifeboat_dr.providers.traffic.base import TrafficRouter, revert, switch


@dataclass(frozen=True)
class ServingSettings:
    """The runbook's `serving` section as plain values (see runbooks/model.py)."""

    standby_site: str  # the standby's name at the router
    budget_s: float  # health and canary latency budget
    health_path: str = "/healthz"
    model_path: str = "/v1/model"
    canary_path: str = "/v1/infer"
    canary_body: dict | None = None
    steps: tuple[int, ...] = (100,)  # percent on the standby after each step
    hold_s: float = 30.0  # watch between steps
    watch_s: float = 120.0  # watch after the last step
    interval_s: float = 0.2
    thresholds: Thresholds = Thresholds(window=20, max_error_rate=0.05, max_p99_s=2.0)


def serving_failover(
    settings: ServingSettings,
    *,
    router: TrafficRouter,
    standby: ModelEndpoint,
    expected_digest: Callable[[], str],
    ledger: RtoLedger,
    outage_started_at: datetime,
    detected_at: datetime | None = None,
    approve: Callable[[RtoLedger], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LedgerEntry:
    """Fail serving over to the standby; the ledger entry says how it went. The two halves
    (`verify_for_switch`, `switch_and_watch`) are also called apart, by the flow, so that a
    human approval between them runs on the flow itself."""
    ledger.mark("outage_start", outage_started_at)
    ledger.mark("detected", detected_at)
    ledger.mark("confirmed")
    if not verify_for_switch(settings, standby=standby, expected_digest=expected_digest, ledger=ledger):
        return ledger.entry
    if approve is not None and not approve(ledger):
        ledger.fail("approval_granted", "the approvers said no", outcome="aborted")
        return ledger.entry
    return switch_and_watch(settings, router=router, standby=standby, ledger=ledger, clock=clock, sleep=sleep)


def verify_for_switch(
    settings: ServingSettings,
    *,
    standby: ModelEndpoint,
    expected_digest: Callable[[], str],
    ledger: RtoLedger,
) -> bool:
    """Verify the standby against the certified weights; `standby_verified` or a failure."""
    ledger.begin("standby_verified")
    try:
        digest = expected_digest()
    except Exception as e:  # no certified weights: nothing to compare the standby with
        ledger.fail("standby_verified", f"certified weights: {type(e).__name__}: {e}")
        return False
    check = verify_standby(
        standby,
        digest,
        budget_s=settings.budget_s,
        health_path=settings.health_path,
        model_path=settings.model_path,
        canary_path=settings.canary_path,
        canary_body=settings.canary_body,
    )
    ledger.note("weights_digest", digest)
    if not check.ok:
        ledger.fail("standby_verified", "standby refused: " + "; ".join(check.problems))
        return False
    ledger.note("canary_ms", f"{check.canary_latency_s * 1000:.0f}")
    ledger.mark("standby_verified")
    return True


def switch_and_watch(
    settings: ServingSettings,
    *,
    router: TrafficRouter,
    standby: ModelEndpoint,
    ledger: RtoLedger,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LedgerEntry:
    """Move traffic by the runbook's steps, watch, and revert past a threshold."""

    def probe() -> Answer:
        return standby.post(
            settings.canary_path,
            settings.canary_body or {"prompt": "lifeboat watch"},
            timeout=settings.budget_s * 2,
        )

    def watched(duration_s: float) -> WatchResult:
        return watch(
            probe,
            settings.thresholds,
            duration_s=duration_s,
            interval_s=settings.interval_s,
            clock=clock,
            sleep=sleep,
        )

    ledger.begin("first_step")
    # A retry after a crash mid-switch reverts to the weights the *first* attempt found.
    before = _parse_weights(ledger.entry.notes.get("weights_before"))
    for i, percent in enumerate(settings.steps):
        shown = switch(router, settings.standby_site, percent)
        if before is None:
            before = shown
            ledger.note("weights_before", _show(before))
        ledger.note("switch", " → ".join(f"{p}%" for p in settings.steps[: i + 1]))
        if i < len(settings.steps) - 1:
            held = watched(settings.hold_s)
            if held.breach:
                return _revert(ledger, router, before, held, f"at {percent}%")
    ledger.mark("first_step")

    ledger.begin("watch_passed")
    held = watched(settings.watch_s)
    if held.breach:
        return _revert(ledger, router, before, held, "after the switch")
    ledger.note("watch", _summary(held))
    ledger.mark("watch_passed")
    return ledger.finish("completed")


def _show(weights: dict[str, int]) -> str:
    return ", ".join(f"{s}={w}" for s, w in weights.items())


def _parse_weights(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    return {site: int(w) for site, _, w in (part.partition("=") for part in text.split(", "))}


def _summary(w: WatchResult) -> str:
    p99 = "—" if w.p99_s is None else f"{w.p99_s * 1000:.0f} ms"
    return f"{w.requests} requests, error rate {w.error_rate:.1%}, P99 {p99}"


def _revert(
    ledger: RtoLedger, router: TrafficRouter, before: dict[str, int], held: WatchResult, when: str
) -> LedgerEntry:
    revert(router, before)
    ledger.note(
        "reverted",
        f"{when}: {held.breach}; weights back to " + ", ".join(f"{s}={w}" for s, w in before.items()),
    )
    ledger.fail("watch_passed", f"reverted {when}: {held.breach}", outcome="reverted")
    return ledger.entry
