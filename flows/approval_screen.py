"""The approval screen in the Prefect UI: the resume form and the card shown above it.

Prefect renders a paused run's `wait_for_input` model as a form and its description
(`RunInput.with_initial_data(description=…)`, saved beside the schema) as Markdown above
it. So the form asks only what a person decides — approve or not, and why — and the card
(evidence, certified checkpoint with step and age, RPO against its target, the plan with
its $/h and node count, prestage readiness, expected RTO, what it resumes from and how it
will prove it, what a mismatch would do, the deadline and what follows it, who may decide) is
the description. Who decided is
never a field: it comes signed from the front door that verified them
(`lifeboat_dr.core.approval_proof`), riding in the same input as extra keys the form does not show.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prefect.input import RunInput
from pydantic import ConfigDict, Field

from lifeboat_dr.providers.chat.base import ApprovalCard

MAX_DESCRIPTION = 20_000  # the card is a summary; evidence lines are cut, never the deadline


class ApprovalForm(RunInput):
    """Approve or reject this failover."""

    model_config = ConfigDict(extra="allow")  # the signed envelope: approver, via, signed_at, signature

    approved: bool = Field(
        title="Approve the failover",
        description="Tick to approve: provision GPUs on the secondary and resume the job there "
        "(this spends the plan's $/h). Leave unticked to reject: the job stays down.",
    )
    reason: str = Field(
        min_length=1,
        title="Reason",
        description="Why you decide so. Recorded in the ledger and shown on the Slack card.",
    )


def _cell(text: str) -> str:
    """One line of Markdown text: no newlines breaking the list, no HTML or link syntax."""
    for ch in "\\`*_[]<>|#":
        text = text.replace(ch, "\\" + ch)
    return " ".join(text.split())


def card_markdown(card: ApprovalCard, now: datetime | None = None) -> str:
    """The card as the form's description: one line per fact, read in ten seconds (a list,
    not a table: long checkpoint URIs wrap instead of running out of the dialog)."""
    now = now or datetime.now(UTC)
    title = f"{'DRILL — ' if card.drill else ''}Failover approval: {card.runbook}"
    rows = []
    for label, text in card.facts():
        if label == "Deadline" and card.deadline is not None:
            left = max(int((card.deadline - now).total_seconds()), 0)
            text = f"{text} ({left // 60} min {left % 60} s left; then the runbook's on_timeout applies)"
        rows.append(f"- **{label}:** {_cell(text)[:2000]}")
    body = "\n".join([f"## {_cell(title)}", "", *rows, "", f"Run `{card.run_id}`."])
    return body[:MAX_DESCRIPTION]


def approval_form(card: ApprovalCard, now: datetime | None = None) -> type[ApprovalForm]:
    """The form model for this pause, with the card as its description."""
    return ApprovalForm.with_initial_data(description=card_markdown(card, now))
