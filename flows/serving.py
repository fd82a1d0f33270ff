"""The serving path of the `failover` flow: a realtime-inference runbook moves traffic.

`lifeboat_dr.flows.failover.failover` hands a runbook with a `serving` section here. Thin: `lifeboat_dr.flows.wiring`
builds the router, the standby endpoint, the expected weights digest and the settings; the
core (`lifeboat_dr.core.serving.failover`) runs as two task runs, "verify standby" and "switch
traffic" (switch, watch, revert), each retried on `ProviderUnavailable` (verifying again and
setting the same weights again are idempotent). Approval, when the runbook requires it, runs
between them on the flow itself (a Prefect pause must), through the same gate as training's,
with a card that names the standby instead of a plan.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from lifeboat_dr.kernel.errors import ProviderUnavailable


def _retryable(task, task_run, state) -> bool:
    try:
        state.result()
    except ProviderUnavailable:
        return True
    except BaseException:
        return False
    return False


@task(name="verify standby", cache_policy=NO_CACHE, persist_result=False, retry_condition_fn=_retryable)
def _verify(settings, standby, digest, ledger) -> bool:
    from lifeboat_dr.core.serving.failover import verify_for_switch

    return verify_for_switch(settings, standby=standby, expected_digest=digest, ledger=ledger)


@task(name="switch traffic", cache_policy=NO_CACHE, persist_result=False, retry_condition_fn=_retryable)
def _switch(settings, router, standby, ledger):
    from lifeboat_dr.core.serving.failover import switch_and_watch

    return switch_and_watch(settings, router=router, standby=standby, ledger=ledger)


def serve_failover(
    rb,
    *,
    run_id: str,
    outage_started_at: datetime | None,
    detected_at: datetime | None,
    evidence: list[str] | None,
    approval: str,
    drill: str | None,
    dry_run: bool,
) -> dict:
    """Run the serving failover for `rb` inside the current flow run; publish its record."""
    from lifeboat_dr.flows.record import publish
    from lifeboat_dr.flows.wiring import (
        build_ledger,
        build_router,
        certified_weights_digest,
        serving_settings,
    )
    from lifeboat_dr.providers.serving.http import HttpEndpoint

    if dry_run:  # the same failover over toy servers behind a local HAProxy, primary killed
        from lifeboat_dr.flows.serving_sandbox import serving_sandbox

        folder = Path(".lifeboat/sandbox") / f"{rb.name}-{run_id}"
        with serving_sandbox(rb, folder) as box:
            router = build_router(box.rb)
            outage = datetime.now(UTC)
            box.kill_primary()
            detected, evidence = box.confirm_outage(router)
            return serve_failover(
                box.rb,
                run_id=run_id,
                outage_started_at=outage,
                detected_at=detected,
                evidence=evidence,
                approval="approve" if approval == "wait" else approval,
                drill=drill or "dry-run",
                dry_run=False,
            )
    now = datetime.now(UTC)
    ledger = build_ledger(rb, run_id=run_id, drill=drill)
    settings, standby = serving_settings(rb), HttpEndpoint(rb.serving.standby_url)
    retried = {"retries": rb.failover.retries, "retry_delay_seconds": rb.failover.retry_delay.total_seconds()}
    try:
        ledger.mark("outage_start", outage_started_at or now)
        ledger.mark("detected", detected_at or now)
        ledger.mark("confirmed")
        verified = _verify.with_options(**retried)(settings, standby, certified_weights_digest(rb), ledger)
        approved = verified and (
            not rb.approval.required or _approve(rb, run_id, evidence, drill, approval, ledger)
        )
        if verified and not approved:
            ledger.fail("approval_granted", "the approvers said no", outcome="aborted")
        if approved:
            _switch.with_options(**retried)(settings, build_router(rb), standby, ledger)
    finally:
        picture = publish(ledger.entry)
    entry = ledger.entry
    return {
        "run_id": run_id,
        "outcome": entry.outcome,
        "rto_s": entry.rto.total_seconds() if entry.rto else None,
        "rpo_s": None,
        "checkpoint": None,
        "timeline": str(picture) if picture else None,
        "failures": [f.error for f in entry.failures],
    }


def _approve(rb, run_id: str, evidence, drill, approval: str, ledger) -> bool:
    from lifeboat_dr.flows.wiring import build_gate
    from lifeboat_dr.providers.chat.base import ApprovalCard

    card = ApprovalCard(
        runbook=rb.name,
        run_id=run_id,
        channel=rb.approval.channel,
        evidence=list(evidence or []),
        checkpoint=f"standby {rb.serving.standby_url}: serves the certified weights, canary in budget",
        plan=f"move traffic to {rb.serving.traffic.secondary} ({rb.serving.traffic.router.value}), "
        f"steps {rb.serving.switch.steps}",
        rto_target=rb.rto_target,
        approvers=list(rb.approval.approvers),
        drill=bool(drill),
        action="serving",
    )
    gate = build_gate(rb, console=approval)
    decision = gate.request(card, ledger)
    gate.announce()
    return decision.approved
