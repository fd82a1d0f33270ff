"""One decision for the fleet: the plan as one question, who may answer it, and the card's text.

The fleet flow asks its question through the single-runbook gate (`flows/approval.py`), so a
fleet decision is a signed decision like any other: Ed25519 over an `Ask` whose run is the
fleet's flow run and whose runbook is `fleet-<digest>`, the digest of every placement in the
plan. A decision signed for one runbook, for another plan or for another fleet run therefore
never verifies here, and a fleet decision verifies nowhere else.

Who may decide is every placed runbook's allow-list at once (`fleet_approval`): an approver
counts only if each of those runbooks lists them, with only the logins each of them gives.
The plan is approved or rejected whole (Slack's buttons, `lifeboat approve` without `--job`),
or job by job: the Prefect UI's fleet form and `lifeboat approve --job` send the placed jobs
approved (`ApprovalDecision.jobs`), signed with the rest of the answer; the others are denied.
A per-job answer naming a job the plan did not place, or one signed for another plan, is
refused (`verify_signed`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import timedelta

from lifeboat_dr.core.fleet.plan import FleetJob, FleetPlan
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ConfigError

FLEET_PREFIX = "fleet-"


def plan_digest(plan: FleetPlan) -> str:
    """SHA-256 of every placement (job, GPUs, place, wait): what the signature binds."""
    rows = [
        [p.job, p.gpus, str(p.place) if p.place else None, p.wait_s, p.downgraded] for p in plan.placements
    ]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def fleet_name(plan: FleetPlan) -> str:
    """The name the fleet's ask carries as its runbook: no runbook name starts with `fleet-` and
    16 hex digits of the plan's digest."""
    return FLEET_PREFIX + plan_digest(plan)[:16]


def fleet_approval(sections: Sequence, *, rehearsal: bool = False):
    """The approval section of the fleet's gate: the approvers every section lists (their logins
    too), the shortest timeout, `proceed` on timeout only when every section says so.

    `sections`: the placed runbooks' `Approval` sections. `ConfigError` when approval is required
    and no approver is on every list (outside a rehearsal, whose console decides)."""
    from lifeboat_dr.runbooks.model import Approval, OnTimeout

    required = [s for s in sections if s.required]
    if not required:
        return Approval(required=False)
    common = [a for a in required[0].approvers if all(a in s.approvers for s in required)]
    if not common and rehearsal:
        return required[0]
    if not common:
        raise ConfigError(
            "fleet approval: no approver is on every placed runbook's approval.approvers; "
            "approve each runbook's failover on its own"
        )
    logins = {
        a: [n for n in required[0].logins.get(a, []) if all(n in s.logins.get(a, []) for s in required)]
        for a in common
    }
    proceed = all(s.on_timeout is OnTimeout.proceed for s in required)
    return Approval(
        required=True,
        approvers=common,
        channel=required[0].channel,
        logins={a: names for a, names in logins.items() if names},
        timeout=min(s.timeout for s in required),
        on_timeout=OnTimeout.proceed if proceed else OnTimeout.abort,
    )


def card_lines(plan: FleetPlan, jobs: Mapping[str, FleetJob], expected: Mapping[str, timedelta]) -> list[str]:
    """One line per job, in the fleet's order (the card numbers them): where it runs (GPU type, downgrade marked),
    $/h, expected RTO against its class target; or how long it waits."""
    lines = []
    for p in plan.placements:
        job = jobs[p.job]
        target = format_duration(timedelta(seconds=job.rto_s))
        price = "price unknown" if p.cost_per_h_usd is None else f"${p.cost_per_h_usd:,.0f}/h"
        if not p.waits:
            gpu = p.place.accelerator + (
                f" (downgraded from {job.candidates[0].accelerator})" if p.downgraded else ""
            )
            rto = format_duration(expected[p.job]) if p.job in expected else "unknown"
            lines.append(
                f"{p.job}: {p.gpus}x {gpu} on {p.place.infra}, {price}, expected RTO {rto} (target {target})"
            )
        else:
            lines.append(f"{p.describe()}; not failed over now (target {target})")
    return lines


class FleetDecisionGate:
    """A member failover's `Gate` (`core/failover/contract.py`): the decision the fleet's gate
    verified, recorded in the member's own ledger as its approval; for `job`, a per-job
    decision that leaves it out is its denial. Built only by the fleet flow from what its gate
    returned: no parameter or API call can hand a failover one."""

    def __init__(self, decision, fleet: str, fleet_run_id: str, notify=None, *, job: str | None = None):
        self.decision, self.fleet, self.fleet_run_id, self.job = decision, fleet, fleet_run_id, job
        self._notify = notify

    def request(self, card, ledger):
        """Records the decision for this job and returns it (a denial: as a rejection)."""
        ledger.mark("approval_requested")
        d = self.decision
        approved = d.approves(self.job) if self.job is not None else d.approved
        per_job = f", per job (approved: {', '.join(d.jobs) or 'none'})" if d.jobs is not None else ""
        said = (
            f"by {d.approver} via {d.via}{per_job}: {d.reason} "
            f"(the fleet decision {self.fleet}, run {self.fleet_run_id})"
        )
        verdict = "approved" if approved else ("denied" if d.approved else "rejected")
        ledger.note("approval", f"{verdict} {said}")
        if approved:
            ledger.mark("approval_granted")
            return d
        ledger.fail("approval_granted", f"{verdict} {said}", outcome="aborted")
        return d.model_copy(update={"approved": False})

    def announce(self) -> None:
        """The fleet's gate announced the decision once, for every job."""

    def notify(self, text: str) -> None:
        if self._notify is not None:
            self._notify(text)
