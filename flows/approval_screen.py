"""The approval screen in the Prefect UI: the resume form and the card shown above it.

Prefect renders a paused run's `wait_for_input` model as a form and its description
(`RunInput.with_initial_data(description=…)`, saved beside the schema) as Markdown above
it. So the form asks only what a person decides — approve or not, and why — and the card
(evidence, certified checkpoint with step and age, RPO against its target, the plan with
its $/h and node count, prestage readiness, expected RTO, what it resumes from and how it
will prove it, what a mismatch would do, the deadline and what follows it, who may decide) is
the description. A fleet's form adds the placed jobs, to approve some and deny the others
(`fleet_form`). Who decided is
never a field: it comes signed from the front door that verified them
(`lifeboat_dr.core.approval_proof`), riding in the same input as extra keys the form does not show.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from prefect.input import RunInput
from pydantic import ConfigDict, Field, create_model

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


def fleet_form(placed: list[str]) -> type[ApprovalForm]:
    """The fleet's form: the approval form plus the placed jobs to fail over, every one by
    default (a multi-select of their names); a job left out is denied. Signed with the rest."""
    choice = Literal[tuple(placed)]  # type: ignore[valid-type]  # the JSON Schema's enum of job names
    return create_model(
        "FleetApprovalForm",
        __base__=ApprovalForm,
        __doc__="Approve or reject this fleet failover, as a whole or job by job.",
        approved=(
            bool,
            Field(
                title="Approve the fleet failover",
                description="Tick to approve the jobs chosen below: each fails over to its placement "
                "(this spends their $/h). Leave unticked to reject every job: they stay down.",
            ),
        ),
        jobs=(
            list[choice],
            Field(
                default=list(placed),
                title="Jobs to fail over now",
                description="The placed jobs this approval covers, every one by default. Remove a job "
                "to deny it: it does not fail over, and its ledger and the fleet's record say denied.",
                # an enum even for one job (pydantic writes `const`), so the UI shows a choice
                json_schema_extra={"items": {"type": "string", "enum": list(placed)}},
            ),
        ),
    )


def approval_form(card: ApprovalCard, now: datetime | None = None) -> type[ApprovalForm]:
    """The form model for this pause, with the card as its description (a fleet's card with
    placed jobs: `fleet_form`)."""
    form = fleet_form(card.placed) if card.placed else ApprovalForm
    return form.with_initial_data(description=card_markdown(card, now))
