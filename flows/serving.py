"""The serving path of the `failover` flow: a realtime-inference runbook moves traffic.

`flows.failover.failover` hands a runbook with a `serving` section here. Thin: `flows.wiring`
builds the router, the standby endpoint, the expected weights digest and the settings; the
core (`lifeboat.serving.failover`) verifies, switches, watches and reverts, as one task run
retried on `ProviderUnavailable` (every part of it is idempotent: verifying again, setting the
same weights again); approval, when the runbook requires it, goes through the same gate as
training's, with a card that names the standby and the weights instead of a plan.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from lifeboat.errors import ProviderUnavailable


def _retryable(task, task_run, state) -> bool:
    try:
        state.result()
    except ProviderUnavailable:
        return True
    except BaseException:
        return False
    return False


@task(name="serving failover", cache_policy=NO_CACHE, persist_result=False, retry_condition_fn=_retryable)
def _serving_task(settings, router, standby, digest, ledger, outage, detected, approve):
    from lifeboat.serving.failover import serving_failover

    return serving_failover(
        settings,
        router=router,
        standby=standby,
        expected_digest=digest,
        ledger=ledger,
        outage_started_at=outage,
        detected_at=detected,
        approve=approve,
    )


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
    from flows.record import publish
    from flows.wiring import (
        build_gate,
        build_ledger,
        build_router,
        certified_weights_digest,
        serving_settings,
    )
    from providers.chat.base import ApprovalCard
    from providers.serving.http import HttpEndpoint

    if dry_run:  # the same failover over toy servers behind a local HAProxy, primary killed
        from flows.serving_sandbox import serving_sandbox

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
    approve = None
    if rb.approval.required:
        gate = build_gate(rb, console=approval)

        def approve(led) -> bool:
            card = ApprovalCard(
                runbook=rb.name,
                run_id=run_id,
                channel=rb.approval.channel,
                evidence=list(evidence or []),
                checkpoint=f"standby {rb.serving.standby_url}: verified against the certified weights",
                plan=f"move traffic to {rb.serving.traffic.secondary} ({rb.serving.traffic.router.value}), steps {rb.serving.switch.steps}",
                rto_target=rb.rto_target,
                approvers=list(rb.approval.approvers),
                drill=bool(drill),
            )
            return gate.request(card, led).approved

    run = _serving_task.with_options(
        retries=rb.failover.retries, retry_delay_seconds=rb.failover.retry_delay.total_seconds()
    )
    try:
        entry = run(
            serving_settings(rb),
            build_router(rb),
            HttpEndpoint(rb.serving.standby_url),
            certified_weights_digest(rb),
            ledger,
            outage_started_at or now,
            detected_at or now,
            approve,
        )
    finally:
        picture = publish(ledger.entry)
    return {
        "run_id": run_id,
        "outcome": entry.outcome,
        "rto_s": entry.rto.total_seconds() if entry.rto else None,
        "rpo_s": None,
        "checkpoint": None,
        "timeline": str(picture) if picture else None,
        "failures": [f.error for f in entry.failures],
    }
