"""The approval card: everything an approver needs, gathered from the steps so far."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from lifeboat_dr.core.certify import CertifyReport
from lifeboat_dr.core.failover.contract import Confirmation, FailoverSettings, expected_rto
from lifeboat_dr.core.failover.proof import ProofPlan
from lifeboat_dr.core.prestage import PrestageReadiness
from lifeboat_dr.providers.chat.base import ApprovalCard
from lifeboat_dr.providers.compute.base import PlanOption


def approval_card(
    settings: FailoverSettings,
    run_id: str,
    drill: bool,
    confirmed: Confirmation,
    report: CertifyReport,
    options: Sequence[PlanOption],
    readiness: PrestageReadiness,
    now: datetime,
    proof: ProofPlan | None = None,
) -> ApprovalCard:
    """The card for the gate: evidence, certified checkpoint and RPO, the plan with its $/h
    (then the next two fallbacks) and node count, prestage readiness, the expected RTO; what
    the run resumes from and how it will prove it (`proof`), what a mismatch would do (the
    possible rollback), what the deadline does, and who may decide."""
    checkpoint = report.certified
    first = options[0] if options else None
    then = f" (then {', '.join(o.infra for o in options[1:3])})" if len(options) > 1 else ""
    return ApprovalCard(
        runbook=settings.runbook,
        run_id=run_id,
        drill=drill,
        channel=settings.channel,
        evidence=list(confirmed.evidence),
        checkpoint=f"{checkpoint.uri} (step {checkpoint.step}, written {checkpoint.written_at:%Y-%m-%d %H:%M:%S}Z)",
        rpo=max(confirmed.outage_started_at - checkpoint.written_at, timedelta(0)),
        rpo_target=settings.rpo_target,
        plan=f"{first.describe()}{then}" if first else None,
        cost_per_hour=first.hourly_usd if first else None,
        prestage=[readiness.summary(), *readiness.items],
        expected_rto=expected_rto(confirmed.outage_started_at, now, settings.expected_ready),
        rto_target=settings.rto_target,
        approvers=list(settings.approvers),
        logins=list(settings.logins),
        on_timeout=settings.on_timeout,
        nodes=settings.nodes,
        resume_from=(proof.resumes if proof is not None and proof.resumes else None)
        or f"step {checkpoint.step}, the newest certified checkpoint",
        proof=proof.line if proof is not None else None,
        if_mismatch=_if_mismatch(settings, proof),
    )


def _if_mismatch(settings: FailoverSettings, proof: ProofPlan | None) -> str | None:
    """What a parity mismatch would do: the card must not hide a rollback to an older checkpoint."""
    if proof is None or proof.how == "none":
        return None if proof is None else "nothing to compare: the job trains on, recorded not provable"
    if settings.on_parity_failure == "page":
        return "stop the job and page"
    if proof.how == "replay":
        return f"page; the job keeps training from step {proof.resume_step} (no rollback)"
    return (
        f"roll back once to the previous certified checkpoint (older than step {proof.resume_step}: "
        "a larger RPO) and prove again; a second mismatch stops and pages"
    )


def asked(steps) -> tuple[str, int | None]:
    """What the gate asks, signed with the answer (`lifeboat_dr.core.approval_proof.Ask`): a
    failback when the fence makes the primary active, else a failover; and the site epoch the
    confirm step saw (None before it, or for steps that keep none)."""
    spec = getattr(steps, "spec", None)  # steps may be wrapped (a drill's recorder): values only
    action = "failback" if getattr(spec, "activates", "secondary") == "primary" else "failover"
    epoch = getattr(steps, "expected_epoch", None)
    return action, epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
