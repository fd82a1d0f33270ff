"""The realtime-serving failover: verify the hot standby, move traffic, watch, revert if needed.

`serving_failover` walks `lifeboat_dr.core.serving.steps.SERVING_STEPS` in order: the one walk
that the `failover` flow (each step a Prefect task run), the serving drills and the serving
demo all run. Plain Python over interfaces: a `TrafficRouter`, the standby's `ModelEndpoint`,
the expected weights digest (a callable, so certifying the weights is timed as part of
"verify"), an optional approval callable (on the walker's thread: a Prefect pause must run
on the flow's). Each step that calls out runs through a `Runner`
(`lifeboat_dr.core.failover.walk`, as training's steps do): retried on `ProviderUnavailable`,
bounded by the step timeout. The walk marks each step's milestone from the table (kind
"serving" in the ledger).

What a step finds is recorded, never raised: a standby that fails verification leaves
traffic where it was (outcome `failed`); a breach while switching by steps or watching puts
the weights back as they were before the switch (outcome `reverted`) and says why — but only
when every site those weights send traffic to is healthy now (the router's check, and the
site's own health endpoint where one is given): otherwise traffic stays on the standby, a
degraded standby being better than a dead primary, and a person is paged (outcome `held`). An error
(the router still unreachable after its retries, a step past its timeout) is recorded
against the milestone the walk was heading for, and raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from lifeboat_dr.core.failover.contract import Confirmation
from lifeboat_dr.core.failover.walk import Runner, ThreadRunner, run_step
from lifeboat_dr.core.ledger import LedgerEntry, RtoLedger
from lifeboat_dr.core.serving.steps import SERVING_STEPS
from lifeboat_dr.core.serving.verify import verify_standby
from lifeboat_dr.core.serving.watch import Thresholds, WatchResult, watch
from lifeboat_dr.kernel.errors import ProviderUnavailable, WriteFailed
from lifeboat_dr.providers.serving.base import Answer, ModelEndpoint
from lifeboat_dr.providers.traffic.base import TrafficRouter, revert, switch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Held:
    """A breach with no healthy site to revert to: traffic stays on the standby, paged."""

    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class ServingSettings:
    """The runbook's `serving` section (and its `failover` retries and timeout) as plain
    values (see runbooks/model.py)."""

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
    retries: int = 0  # of a step that failed on `ProviderUnavailable`
    retry_delay_s: float = 0.0
    step_timeout_s: float = 1800.0  # longest any one step may run


def serving_failover(
    settings: ServingSettings,
    *,
    router: TrafficRouter,
    standby: ModelEndpoint,
    expected_digest: Callable[[], str],
    ledger: RtoLedger,
    outage_started_at: datetime,
    detected_at: datetime | None = None,
    confirm: Callable[[], Confirmation] | None = None,
    approve: Callable[[RtoLedger], bool] | None = None,
    runner: Runner | None = None,
    sites: Mapping[str, ModelEndpoint] | None = None,
    page: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LedgerEntry:
    """Walk the serving steps; the ledger entry says how it went. `confirm` confirms the
    outage as training's confirm step does (`lifeboat_dr.core.failover.steps.confirm_outage`;
    `StopFailover` when the quorum does not, recorded against `confirmed`); None when the
    caller saw it confirmed (a drill's sandbox). `runner` runs the steps that call out
    (threads by default; the flow's runs each as a task run). `sites`: the other sites'
    endpoints by their name at the router, health-checked before a revert sends traffic
    back; `page` tells a person when a revert is held (default: a log warning)."""
    runner = runner or ThreadRunner(settings.retries, settings.retry_delay_s)
    verify = partial(
        verify_for_switch, settings, standby=standby, expected_digest=expected_digest, ledger=ledger
    )
    back = Revert(router, settings, dict(sites or {}), page or _log_page)
    watching = dict(router=router, standby=standby, ledger=ledger, revert=back, clock=clock, sleep=sleep)
    calls = {  # step -> (its call, the outcome when it finds a reason to stop)
        "verify": (verify, "failed"),
        "switch": (partial(switch_traffic, settings, **watching), "reverted"),
        "watch": (partial(watch_switched, settings, **watching), "reverted"),
    }
    step = SERVING_STEPS[0]
    try:
        for step in SERVING_STEPS:
            if step.name == "detect":  # it happened before the walk
                ledger.mark("outage_start", outage_started_at)
                ledger.mark(step.milestone, detected_at)
            elif step.name == "confirm":
                if confirm is not None:
                    seen = run_step(runner, step.name, confirm, timeout_s=settings.step_timeout_s).value
                    ledger.note("evidence", "; ".join(seen.evidence))
                ledger.mark(step.milestone)
            elif step.name == "approval":
                if approve is not None and not approve(ledger):  # the gate marks what it asked
                    ledger.fail(step.milestone, "the approvers said no", outcome="aborted")
                    return ledger.entry
            else:
                call, stopped = calls[step.name]
                done = run_step(runner, step.name, call, timeout_s=settings.step_timeout_s)
                ledger.begin(step.milestone, done.started)
                if done.value is not None:
                    outcome = "held" if isinstance(done.value, Held) else stopped
                    ledger.fail(step.milestone, str(done.value), outcome=outcome)
                    return ledger.entry
                ledger.mark(step.milestone, done.finished)
    except BaseException as e:
        with suppress(WriteFailed):  # an unwritable ledger: its own error is what we raise
            ledger.fail(step.milestone, e)
        raise
    return ledger.finish("completed")


def verify_for_switch(
    settings: ServingSettings,
    *,
    standby: ModelEndpoint,
    expected_digest: Callable[[], str],
    ledger: RtoLedger,
) -> str | None:
    """Verify the standby against the certified weights: None when it may take traffic,
    else why not."""
    try:
        digest = expected_digest()
    except Exception as e:  # no certified weights: nothing to compare the standby with
        return f"certified weights: {type(e).__name__}: {e}"
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
        return "standby refused: " + "; ".join(check.problems)
    ledger.note("canary_ms", f"{check.canary_latency_s * 1000:.0f}")
    return None


def switch_traffic(
    settings: ServingSettings,
    *,
    router: TrafficRouter,
    standby: ModelEndpoint,
    ledger: RtoLedger,
    revert: Revert,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | Held | None:
    """Move traffic by the runbook's steps, watching between them: None once all of it is
    on the standby, else why it went back (or, with nowhere healthy to go back to, held). The weights found before the first move are
    noted in the ledger: a retry after a crash mid-switch reverts to those."""
    before = _weights_before(ledger)
    for i, percent in enumerate(settings.steps):
        shown = switch(router, settings.standby_site, percent)
        if before is None:
            before = shown
            ledger.note("weights_before", _show(before))
        ledger.note("switch", " → ".join(f"{p}%" for p in settings.steps[: i + 1]))
        if i < len(settings.steps) - 1:
            held = _watched(settings, standby, settings.hold_s, clock, sleep)
            if held.breach:
                return revert(ledger, before, held, f"at {percent}%")
    return None


def watch_switched(
    settings: ServingSettings,
    *,
    router: TrafficRouter,
    standby: ModelEndpoint,
    ledger: RtoLedger,
    revert: Revert,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | Held | None:
    """Watch the standby with all traffic on it: None when it held, else why the weights
    went back to what they were before the switch (or why they could not: held)."""
    held = _watched(settings, standby, settings.watch_s, clock, sleep)
    if held.breach:
        return revert(ledger, _weights_before(ledger), held, "after the switch")
    ledger.note("watch", _summary(held))
    return None


def _watched(
    settings: ServingSettings, standby: ModelEndpoint, duration_s: float, clock, sleep
) -> WatchResult:
    def probe() -> Answer:
        return standby.post(
            settings.canary_path,
            settings.canary_body or {"prompt": "lifeboat watch"},
            timeout=settings.budget_s * 2,
        )

    return watch(
        probe,
        settings.thresholds,
        duration_s=duration_s,
        interval_s=settings.interval_s,
        clock=clock,
        sleep=sleep,
    )


def _show(weights: dict[str, int]) -> str:
    return ", ".join(f"{s}={w}" for s, w in weights.items())


def _weights_before(ledger: RtoLedger) -> dict[str, int] | None:
    text = ledger.entry.notes.get("weights_before")
    if not text:
        return None
    return {site: int(w) for site, _, w in (part.partition("=") for part in text.split(", "))}


def _summary(w: WatchResult) -> str:
    p99 = "—" if w.p99_s is None else f"{w.p99_s * 1000:.0f} ms"
    return f"{w.requests} requests, error rate {w.error_rate:.1%}, P99 {p99}"


class Revert:
    """Put the weights back as they were before the switch, if every site they send traffic
    to is healthy now; else hold on the standby and page."""

    def __init__(
        self,
        router: TrafficRouter,
        settings: ServingSettings,
        sites: Mapping[str, ModelEndpoint],
        page: Callable[[str], None],
    ):
        self.router, self.settings, self.sites, self.page = router, settings, sites, page

    def __call__(self, ledger: RtoLedger, before: dict[str, int], held: WatchResult, when: str) -> str | Held:
        back_to = [s for s, w in before.items() if w > 0 and s != self.settings.standby_site]
        sick = [why for why in map(self.unhealthy, back_to) if why]
        if sick:
            text = (
                f"{when}: {held.breach}; not reverted: {'; '.join(sick)}: traffic stays on "
                f"{self.settings.standby_site}"
            )
            ledger.note("held", text)
            self.page(f"lifeboat {ledger.entry.runbook}: serving failover held {text}; a person must decide")
            ledger.note("paged", "the runbook's channel: the revert was held")
            return Held(f"held {when}: {held.breach}; {'; '.join(sick)}")
        revert(self.router, before)
        ledger.note("reverted", f"{when}: {held.breach}; weights back to {_show(before)}")
        return f"reverted {when}: {held.breach}"

    def unhealthy(self, site: str) -> str | None:
        """Why `site` may not take traffic now, or None: the router's check, then its own
        health endpoint (when given)."""
        try:
            seen = self.router.health().get(site)
        except ProviderUnavailable as e:
            return f"the router's view of {site} is unknown ({e})"
        if seen is not None and seen.state == "down":
            return f"{site} is down by the router's check ({seen.detail or 'no detail'})"
        endpoint = self.sites.get(site)
        if endpoint is not None:
            answer = endpoint.get(self.settings.health_path, timeout=self.settings.budget_s)
            if not answer.ok:
                return f"{site}'s health endpoint: {answer.error or answer.status}"
        return None


def _log_page(text: str) -> None:
    log.warning("%s", text)
