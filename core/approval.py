"""The approval gate as a small state machine: pure, clock injected, every event on its trail.

    requested ──(approvers' timeout)──► escalated ──(escalation timeout)──► policy default
        │                                   │                                (on_timeout)
        └──────── decided by a person ◄─────┘

A run asks the runbook's approvers; if nobody answers within `approval.timeout` and the
runbook names `escalation` approvers, they are asked too (the first approvers may still
answer) until `escalation.timeout`; then `approval.on_timeout` decides: `abort` rejects,
`proceed` approves, `escalate` (nothing left to escalate to) rejects. Each trail entry keeps
who, when and why, refusals included. A person may decide only as a verified identity on
the allow-list: a Slack user id among the approvers, or a login the identity proxy verified
that `approval.logins` maps to one (`who`); verifying the identity is the caller's part
(`lifeboat_dr.core.approval_proof`). The policy decides only at the final deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.kernel.text import markdown_text, one_line
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via

if TYPE_CHECKING:
    from lifeboat_dr.runbooks.model import Approval

MAX_WHO = 120  # a trail's who and why are capped: a resume's fields are anyone's to fill
MAX_WHY = 600


@dataclass(frozen=True)
class TrailEntry:
    """One thing that happened at the gate: a line of its trail."""

    kind: str  # requested | escalated | timed_out | decided | refused
    at: datetime
    who: str  # approver(s) asked, the person who decided, or "policy"
    why: str

    def line(self) -> str:
        return f"{self.at.isoformat(timespec='seconds')} {self.kind}: {self.who} — {self.why}"


@dataclass(frozen=True)
class Escalate:
    """Action: ask these approvers too, until `until`."""

    approvers: tuple[str, ...]
    until: datetime


@dataclass(frozen=True)
class _Stage:
    approvers: tuple[str, ...]
    timeout: timedelta


@dataclass
class ApprovalProcess:
    """One run's approval gate. Build with `from_runbook`; drive with `tick` and `decide`."""

    stages: list[_Stage]
    on_timeout: str  # abort | proceed | escalate
    requested_at: datetime
    required: bool = True
    logins: dict[str, tuple[str, ...]] = field(default_factory=dict)  # approver -> verified logins
    trail: list[TrailEntry] = field(default_factory=list)
    decision: ApprovalDecision | None = None
    _stage: int = 0

    @classmethod
    def from_runbook(cls, approval: Approval, requested_at: datetime) -> ApprovalProcess:
        """`approval` is the runbook's `Approval` section."""
        stages = [_Stage(tuple(approval.approvers), approval.timeout)]
        if approval.escalation is not None:
            stages.append(_Stage(tuple(approval.escalation.approvers), approval.escalation.timeout))
        logins = {a: tuple(names) for a, names in approval.logins.items()}
        proc = cls(stages, str(approval.on_timeout), requested_at, required=approval.required, logins=logins)
        if not approval.required:
            proc._record("decided", requested_at, "policy", "approval not required by the runbook")
            proc.decision = ApprovalDecision(
                approved=True,
                reason="approval not required by the runbook",
                approver="policy",
                via=Via.policy,
            )
        else:
            asked = ", ".join(stages[0].approvers)
            proc._record(
                "requested", requested_at, asked, f"answer within {format_duration(stages[0].timeout)}"
            )
        return proc

    @property
    def asked(self) -> frozenset[str]:
        """Who has been asked so far: the approvers of every stage reached."""
        return frozenset(a for s in self.stages[: self._stage + 1] for a in s.approvers)

    @property
    def allowed(self) -> frozenset[str]:
        """Who may decide: every approver the runbook names, escalation included (an
        escalation approver may step in before being asked; `lifeboat serve` checks the
        same list)."""
        return frozenset(a for s in self.stages for a in s.approvers)

    @property
    def deadline(self) -> datetime:
        """When the current stage runs out."""
        return self.requested_at + sum((s.timeout for s in self.stages[: self._stage + 1]), timedelta(0))

    @property
    def final_deadline(self) -> datetime:
        """When the policy default applies if nobody answers at all."""
        return self.requested_at + sum((s.timeout for s in self.stages), timedelta(0))

    @property
    def decided(self) -> bool:
        return self.decision is not None

    def tick(self, now: datetime) -> Escalate | ApprovalDecision | None:
        """What the deadline asks for at `now`: nothing yet, an escalation, or the policy's decision."""
        if self.decided or now < self.deadline:
            return None
        waited = format_duration(self.stages[self._stage].timeout)
        asked = ", ".join(self.stages[self._stage].approvers)
        self._record("timed_out", now, asked, f"no answer within {waited}")
        if self._stage + 1 < len(self.stages):
            self._stage += 1
            stage = self.stages[self._stage]
            self._record(
                "escalated",
                now,
                ", ".join(stage.approvers),
                f"answer within {format_duration(stage.timeout)}",
            )
            return Escalate(stage.approvers, self.deadline)
        approved = self.on_timeout == "proceed"
        why = f"nobody answered by {self.deadline.isoformat(timespec='seconds')}: runbook on_timeout={self.on_timeout}"
        if self.on_timeout == "escalate":
            why += " with nobody left to escalate to, so abort"
        return ApprovalDecision(approved=approved, reason=why, approver="policy", via=Via.policy)

    def who(self, decision: ApprovalDecision) -> str | None:
        """The runbook approver a *verified* decision speaks for, or None if not on the allow-list.
        Slack decisions carry a Slack user id; UI and CLI decisions the login the identity
        proxy verified, mapped through `approval.logins`. The policy has no approver."""
        if decision.via == Via.slack:
            return decision.approver if decision.approver in self.allowed else None
        if decision.via in (Via.ui, Via.cli):
            return next(
                (a for a in sorted(self.allowed) if decision.approver in self.logins.get(a, ())), None
            )
        return None

    def deciders(self) -> dict[str, list[str]]:
        """The approvers a login may speak for now, each with its verified logins (what the gate
        publishes for the identity proxy's screen: `viewer_may_decide`)."""
        return {a: list(self.logins.get(a, ())) for a in sorted(self.allowed)}

    def refusal(self, decision: ApprovalDecision, now: datetime) -> str | None:
        """Why `decision` may not decide this gate, or None. The caller has verified who sent it
        (`lifeboat_dr.core.approval_proof`); the console's answer is the flow's own (dry runs, drills)."""
        if self.decided:
            return (
                f"already {'approved' if self.decision.approved else 'rejected'} by {self.decision.approver}"
            )
        if decision.via == Via.policy:
            return None if now >= self.final_deadline else "the policy decides only at the final deadline"
        if decision.via == Via.console:
            return None
        if decision.via == Via.prefect:  # Prefect's Cancel: anyone holding its API may stop a run
            return None if not decision.approved else "a cancel in Prefect can only reject"
        if self.who(decision) is None:
            return f"{decision.approver} (via {decision.via}) is not an approver for this runbook"
        return None

    def refuse(self, who: str, why: str, now: datetime) -> None:
        """Record a resume that did not count (unverified, or not on the allow-list)."""
        self._record("refused", now, who, why)

    def decide(self, decision: ApprovalDecision, now: datetime) -> ApprovalDecision:
        """Record the decision. A second decision, a person not on the allow-list or a policy
        decision before the deadline is refused (`PreconditionFailed`) and recorded."""
        if (why := self.refusal(decision, now)) is not None:
            self.refuse(decision.approver, why, now)
            raise PreconditionFailed(why)
        self.decision = decision
        verdict = "approved" if decision.approved else "rejected"
        speaks_for = self.who(decision)
        who = (
            decision.approver
            if speaks_for in (None, decision.approver)
            else f"{decision.approver} ({speaks_for})"
        )
        self._record("decided", now, who, f"{verdict} via {decision.via}: {decision.reason}")
        return decision

    def _record(self, kind: str, at: datetime, who: str, why: str) -> None:
        # who and why may come from outside (a resume's approver, a reason): one line, capped
        self.trail.append(TrailEntry(kind, at, one_line(who, MAX_WHO), one_line(why, MAX_WHY)))

    def trail_markdown(self) -> str:
        """The trail as a Markdown table; text from outside renders as text, never as markup."""
        rows = ["| when | step | who | why |", "|---|---|---|---|"]
        rows += [
            f"| {s.at.isoformat(timespec='seconds')} | {s.kind} | {markdown_text(s.who, MAX_WHO)} "
            f"| {markdown_text(s.why, MAX_WHY)} |"
            for s in self.trail
        ]
        return "\n".join(rows) + "\n"


def viewer_may_decide(login: str | None, deciders: object) -> str:
    """One Markdown line for the approval screen, per viewer: whether the person the identity
    proxy verified as `login` may decide (by the same mapping `who` applies to their
    decision), from what the gate published (`ApprovalProcess.deciders`)."""
    if not login:
        return "**Log in** through the identity proxy to see whether you may decide."
    you = markdown_text(login)
    if not isinstance(deciders, dict):
        return f"**You ({you}): this run has not published who may decide**; the run checks your decision."
    speaks_for = sorted(a for a, names in deciders.items() if isinstance(names, list) and login in names)
    if speaks_for:
        return f"**You ({you}) may approve or reject** (approver {markdown_text(', '.join(speaks_for))})."
    known = sorted(
        {n for names in deciders.values() if isinstance(names, list) for n in names if isinstance(n, str)}
    )
    return (
        f"**You ({you}) may not decide:** not among the approvers' logins "
        f"(approval.logins: {markdown_text(', '.join(known)) or 'none mapped'}); a decision you send is refused and recorded."
    )
