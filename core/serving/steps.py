"""The realtime-serving failover's step table, beside the training one (`lifeboat_dr.core.failover.graph`).

    detect ─► confirm ─► verify standby ─► approval (optional) ─► switch traffic ─► watch

No fence, certify-and-resume or provisioning: the standby is already running. "verify"
reaches `standby_verified` (same weights digest as the certified weights, health, canary in
budget); "switch" reaches `traffic_switched` (all traffic on the standby: the serving RTO
ends there); "watch" reaches `watch_passed` (error rate and P99 held). The walker
(`lifeboat_dr.core.serving.failover`), the ledger and the timeline read this table for
entries of kind "serving".
"""

from __future__ import annotations

from lifeboat_dr.core.failover.graph import RTO_END, STEPS, Step

SERVING_STEPS: tuple[Step, ...] = (
    Step("detect", (), "detected", "detect", starts_at="outage_start"),
    Step("confirm", ("detect",), "confirmed", "confirm"),
    Step("verify", ("confirm",), "standby_verified", "verify standby (weights digest, health, canary)"),
    Step(
        "approval",
        ("verify",),
        "approval_granted",
        "approval",
        marks=("approval_requested",),
        starts_at="approval_requested",
    ),
    Step(
        "switch", ("approval",), "traffic_switched", "switch traffic to the standby", early_after=("verify",)
    ),
    Step("watch", ("switch",), "watch_passed", "watch error rate and P99"),
)

# Milestones only the serving table has, for the ledger's list of known milestones.
SERVING_ONLY: tuple[str, ...] = tuple(
    m
    for s in SERVING_STEPS
    for m in (*s.marks, s.milestone)
    if m not in {x for t in STEPS for x in (*t.marks, t.milestone)}
)


# Where the RTO ends: all traffic on the standby (training's: the first healthy step).
SERVING_RTO_END = "traffic_switched"

# Serving milestones under the names that ledgers written before used for them.
SERVING_RENAMED: dict[str, str] = {"first_step": "traffic_switched"}


def steps_for(kind: str) -> tuple[Step, ...]:
    """The step table a ledger entry of this kind was recorded against."""
    return SERVING_STEPS if kind == "serving" else STEPS


def rto_end(kind: str) -> str:
    """The milestone a ledger entry of this kind measures its RTO to."""
    return SERVING_RTO_END if kind == "serving" else RTO_END
