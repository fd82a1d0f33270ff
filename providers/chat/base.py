"""The chat interface: post the approval card, update it with the outcome, talk to people.

The card is plain data (`ApprovalCard`); each backend renders it its own way (Block Kit,
console text). Backends raise `ProviderUnavailable` for retryable failures (rate limits,
5xx, connection refused) and `ConfigError` for a bad token or an unknown channel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from lifeboat_dr.kernel.durations import format_duration


class Via(StrEnum):
    ui = "ui"
    slack = "slack"
    cli = "cli"
    policy = "policy"
    console = "console"  # the flow's own answer (`approval=approve|reject`: dry runs, drills, demos)
    prefect = "prefect"  # Prefect's Cancel on the paused run: not a person, and only ever a rejection


class ApprovalDecision(BaseModel):
    """A decision at the approval gate: who, through which channel, what and why. A person's
    decision reaches a paused run only signed by the front door that verified them
    (`lifeboat_dr.core.approval_proof`); the Prefect UI's form asks only for `approved` and `reason`."""

    approved: bool = Field(
        description="Approve: provision GPUs on the secondary and resume the job there. "
        "Leave unticked to reject and stop the failover."
    )
    reason: str = Field(
        min_length=1,
        description="Why you decide so. Recorded in the ledger and shown on the Slack card.",
    )
    approver: str = Field("unknown", description="Who decided: a Slack user ID or a verified login.")
    via: Via = Field(Via.ui, description="Where the decision was made: ui, slack, cli, policy or console.")
    jobs: list[str] | None = Field(
        None,
        description="A fleet's decision per job: the placed jobs approved (the others denied). "
        "None: the whole plan, approved or rejected as one.",
        exclude_if=lambda jobs: jobs is None,  # a whole decision dumps (and resumes a run) as before
    )

    def approves(self, job: str) -> bool:
        """Whether this decision lets `job` (one of a fleet's placed jobs) fail over."""
        return self.approved and (self.jobs is None or job in self.jobs)


ON_TIMEOUT = {  # approval.on_timeout, as the card says it
    "abort": "abort: the failover stops, the job stays down",
    "proceed": "proceed by policy: the failover goes ahead unapproved",
    "escalate": "escalate to the escalation approvers",
}

APPROVE_ACTION = "lifeboat_approve"
REJECT_ACTION = "lifeboat_reject"


@dataclass
class ApprovalCard:
    """Everything an approver needs to decide, gathered by the failover flow."""

    runbook: str
    run_id: str  # the Prefect flow run to resume
    channel: str | None = None  # Slack channel ID; the console ignores it
    evidence: list[str] = field(default_factory=list)  # the signals that confirmed the outage
    checkpoint: str | None = None  # certified checkpoint URI on the secondary
    rpo: timedelta | None = None  # outage start minus that checkpoint's write time
    rpo_target: timedelta | None = None
    plan: str | None = None  # e.g. "gcp/us-central1 a3-highgpu-8g 8x H100 (spot: no)"
    cost_per_hour: float | None = None  # USD/h of the plan
    prestage: list[str] = field(default_factory=list)  # readiness lines: "image …: ready"
    expected_rto: timedelta | None = None
    rto_target: timedelta | None = None
    approvers: list[str] = field(default_factory=list)
    deadline: datetime | None = None  # when the policy default applies
    run_url: str | None = None  # link to the run in the Prefect UI
    drill: bool = False  # a rehearsal: said on the card so nobody panics
    action: str = "failover"  # what is approved: failover | failback | serving (signed with the answer)
    logins: list[str] = field(default_factory=list)  # verified logins that may decide (approval.logins)
    on_timeout: str | None = None  # what the deadline does when nobody decides: abort | approve | …
    nodes: int | None = None  # nodes behind the plan's $/h
    resume_from: str | None = None  # "step 40, the newest certified checkpoint"
    proof: str | None = None  # how the resumed job will prove it: its own steps, a replay, none
    if_mismatch: str | None = None  # what a parity mismatch would do (a possible rollback)
    epoch: int | None = None  # the site epoch when asked (signed with the answer: no replay across epochs)
    jobs: list[str] = field(default_factory=list)  # a fleet's card: one line per job, in place of one plan
    placed: list[str] = field(
        default_factory=list
    )  # a fleet's card: the jobs a decision may approve one by one

    @property
    def what(self) -> str:
        """What is approved, as people say it: "failover", "failback", "serving failover"."""
        return "serving failover" if self.action == "serving" else self.action

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) lines shared by every rendering."""

        def vs(value: timedelta | None, target: timedelta | None) -> str:
            text = format_duration(value) if value is not None else "unknown"
            return f"{text} (target {format_duration(target)})" if target is not None else text

        priced = self.cost_per_hour is not None and "/h" not in (self.plan or "")  # describe() prices
        cost = f" — ${self.cost_per_hour:,.2f}/h" if priced else ""
        nodes = (
            f" — {self.nodes} node{'s' if self.nodes != 1 else ''} (the $/h is the whole cluster's)"
            if self.nodes
            else ""
        )
        deadline = self.deadline.isoformat(timespec="seconds") if self.deadline else "none"
        if self.jobs:  # a fleet: each job its own line; each certifies its own checkpoint after the decision
            total = f"${self.cost_per_hour:,.2f}/h" if self.cost_per_hour is not None else "unknown"
            what = [
                *((f"Job {n}", line) for n, line in enumerate(self.jobs, 1)),
                ("Cost of the placed jobs", total),
            ]
        else:
            what = [
                ("Certified checkpoint", self.checkpoint or "none certified"),
                ("RPO", vs(self.rpo, self.rpo_target)),
                ("Resumes from", self.resume_from),
                ("Proof", self.proof),
                ("On a parity mismatch", self.if_mismatch),
                ("Plan", (self.plan or "not planned yet") + cost + nodes),
                ("Prestage", "; ".join(self.prestage) or "nothing to prestage"),
            ]
        lines = [
            ("Outage evidence", "; ".join(self.evidence) or "none recorded"),
            *what,
            ("Expected RTO", vs(self.expected_rto, self.rto_target)),
            ("Deadline", deadline),
            (
                "At the deadline",
                ON_TIMEOUT.get(self.on_timeout, self.on_timeout) if self.on_timeout else None,
            ),
            ("May decide", self.deciders()),
        ]
        return [(label, text) for label, text in lines if text is not None]

    def deciders(self) -> str | None:
        """Who may decide: the verified logins (and the approvers they stand for)."""
        if not (self.logins or self.approvers):
            return None
        who = ", ".join(self.logins) if self.logins else "no login is mapped (approval.logins)"
        return f"{who} — approvers {', '.join(self.approvers) or 'any'}; any other decision is refused and recorded"


@dataclass(frozen=True)
class CardRef:
    """Where a posted card lives, to update it later."""

    channel: str
    ts: str  # Slack message timestamp; the console uses a counter


def outcome_text(decision: ApprovalDecision, at: datetime) -> str:
    verdict = "Approved" if decision.approved else "Rejected"
    who = "policy" if decision.via == "policy" else decision.approver
    return f"{verdict} by {who} via {decision.via} at {at.isoformat(timespec='seconds')}: {decision.reason}"


@runtime_checkable
class Chat(Protocol):
    def post_card(self, card: ApprovalCard) -> CardRef:
        """Post the card with Approve/Reject buttons to `card.channel`."""
        ...

    def update_card(self, ref: CardRef, card: ApprovalCard, outcome: str) -> None:
        """Replace the buttons with the outcome (who, when, why)."""
        ...

    def post(self, channel: str, text: str, thread: CardRef | None = None) -> None:
        """A plain message, e.g. the escalation notice, optionally in the card's thread."""
        ...

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        """A message only `user` sees, e.g. a refusal."""
        ...

    def answer(self, card: ApprovalCard) -> ApprovalDecision | None:
        """A decision the backend can give at once (console auto-approve or prompt),
        or None: wait for a person in the UI, in Slack or at `lifeboat approve`."""
        ...
