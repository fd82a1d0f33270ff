"""The serving path of the `failover` flow: a realtime-inference runbook moves traffic.

`lifeboat_dr.flows.failover.failover` hands a runbook with a `serving` section here. Thin:
`lifeboat_dr.flows.wiring` builds the router, the standby endpoint, the expected weights
digest and the settings; the core's serving walk (`lifeboat_dr.core.serving.failover`, the
same one the serving drills and the demo run) goes through the serving step table, each step
that calls out one task run (`lifeboat_dr.flows.runner.PrefectRunner`: "verify", "switch",
"watch", retried only on `ProviderUnavailable`; verifying again and setting the same weights
again are idempotent). It goes through the guard every acting flow does
(`lifeboat_dr.flows.guard`: no parameter approves outside a sandbox, `force` is noted, the
runbook's lock is held) and confirms the outage as training does: the watch flow's evidence,
else the quorum over the runbook's probes now. Approval, when the runbook requires it, runs
between them on the flow itself (a Prefect pause must), through the same gate as training's,
with a card that names the standby instead of a plan. The flow publishes the record.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from pathlib import Path


def serve_failover(
    rb,
    *,
    run_id: str,
    outage_started_at: datetime | None,
    detected_at: datetime | None,
    evidence: list[str] | None,
    force: bool,
    approval: str | None,
    dry_run: bool,
) -> dict:
    """Run the serving failover for `rb` inside the current flow run; publish its record."""
    if not dry_run:
        return _serve(
            rb,
            run_id=run_id,
            outage_started_at=outage_started_at,
            detected_at=detected_at,
            evidence=evidence,
            force=force,
            approval=approval,
            rehearsal=False,
        )
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.wiring import build_router

    # the same failover over toy servers behind a local HAProxy, primary killed
    folder = Path(".lifeboat/sandbox") / f"{rb.name}-{run_id}"
    with serving_sandbox(rb, folder) as box:
        router = build_router(box.rb)
        outage = datetime.now(UTC)
        box.kill_primary()
        detected, evidence = box.confirm_outage(router)
        return rehearse(
            box.rb,
            run_id=run_id,
            outage_started_at=outage,
            detected_at=detected,
            evidence=evidence,
            approval="approve" if approval in (None, "wait") else approval,
        )


def rehearse(rb, *, run_id, outage_started_at, detected_at, evidence, approval="approve") -> dict:
    """The serving failover of a sandboxed runbook (`flows.serving_sandbox`), as a dry run or a
    drill runs it: the same guarded walk and task runs as a real one, its ledger entry a drill."""
    return _serve(
        rb,
        run_id=run_id,
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=False,
        approval=approval,
        rehearsal=True,
    )


def _serve(rb, *, run_id, outage_started_at, detected_at, evidence, force, approval, rehearsal) -> dict:
    """Through the guard (parameters, `force` noted, the runbook's lock), the outage confirmed
    by the quorum as training's is (unless the watch flow's evidence came with the run), then
    the serving walk."""
    from lifeboat_dr.core.detection.quorum import QuorumPolicy
    from lifeboat_dr.core.failover.steps import confirm_outage
    from lifeboat_dr.core.serving.failover import serving_failover
    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.record import publish
    from lifeboat_dr.flows.runner import PrefectRunner
    from lifeboat_dr.flows.wiring import (
        build_gate,
        build_ledger,
        build_probes,
        build_router,
        certified_weights_digest,
        serving_settings,
    )
    from lifeboat_dr.kernel.errors import StandDown
    from lifeboat_dr.providers.serving.http import HttpEndpoint

    guard = Guard(rb, run_id, action="serving", approval=approval, rehearsal=rehearsal, force=force)
    ledger = build_ledger(rb, run_id=run_id, drill="dry-run" if rehearsal else None)
    settings = serving_settings(rb)
    gate = build_gate(rb, console=guard.console, drill=rehearsal)
    started = outage_started_at or datetime.now(UTC)
    try:
        with guard.acting(ledger, gate.notify):
            serving_failover(
                settings,
                router=build_router(rb),
                standby=HttpEndpoint(rb.serving.standby_url),
                expected_digest=certified_weights_digest(rb),
                ledger=ledger,
                outage_started_at=started,
                detected_at=detected_at,
                confirm=partial(
                    confirm_outage,
                    lambda: build_probes(rb),
                    QuorumPolicy.from_detection(rb.detection),
                    evidence=tuple(evidence or ()),
                    force=force,
                    outage_started_at=started,
                    detected_at=detected_at,
                ),
                approve=partial(_approve, rb, run_id, evidence, rehearsal, gate)
                if rb.approval.required
                else None,
                runner=PrefectRunner(settings.retries, settings.retry_delay_s),
                sites=primary_site(rb),
                page=gate.notify,
            )
    except StandDown as e:  # another failover of this runbook is running
        ledger.note("stood down", str(e))
        ledger.finish("stood-down")
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


def primary_site(rb) -> dict:
    """The primary's endpoint by its role at the router (`wiring.build_router`): a revert goes
    back to it only when it answers its health check now."""
    from lifeboat_dr.providers.serving.http import HttpEndpoint

    return {"primary": HttpEndpoint(rb.serving.primary_url)}


def _approve(rb, run_id: str, evidence, rehearsal: bool, gate, ledger) -> bool:
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
        drill=rehearsal,
        action="serving",
    )
    decision = gate.request(card, ledger)
    gate.announce()
    return decision.approved
