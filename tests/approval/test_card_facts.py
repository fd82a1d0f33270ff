"""The card hides nothing that may happen (issues #29, #34): what the run resumes from and how
it will prove it, what a mismatch does, what the deadline does, the nodes behind the $/h, who
may decide; and every rendering still fits its medium (Block Kit: at most 10 fields a section)."""

from datetime import UTC, datetime, timedelta

from lifeboat_dr.flows.approval_screen import card_markdown
from lifeboat_dr.providers.chat.slack import card_blocks

from .conftest import make_card

FULL = dict(
    resume_from="step 40, the newest certified checkpoint",
    proof="a replay of step 35 beside it (5 step(s) on a second cluster of the plan, after the first step: no RTO)",
    if_mismatch="page; the job keeps training from step 40 (no rollback)",
    on_timeout="escalate",
    nodes=16,
    logins=["alice@example.com"],
    deadline=datetime(2026, 3, 1, 12, 15, tzinfo=UTC),
)


def test_the_card_says_what_may_happen_before_the_decision():
    facts = dict(make_card(**FULL).facts())
    assert facts["Resumes from"] == "step 40, the newest certified checkpoint"
    assert facts["Proof"].startswith("a replay of step 35 beside it")
    assert facts["On a parity mismatch"] == "page; the job keeps training from step 40 (no rollback)"
    assert facts["At the deadline"] == "escalate to the escalation approvers"
    assert "16 nodes (the $/h is the whole cluster's)" in facts["Plan"]
    assert facts["May decide"].startswith("alice@example.com — approvers U0ALICE, U0BOB")


def test_every_rendering_carries_them_and_slack_sections_hold_at_most_ten_fields():
    card = make_card(**FULL)
    text = card_markdown(card, now=card.deadline - timedelta(minutes=5))
    for label in ("Resumes from", "Proof", "On a parity mismatch", "At the deadline", "May decide"):
        assert f"**{label}:**" in text
    blocks = card_blocks(card)
    assert all(len(b.get("fields", ())) <= 10 for b in blocks)
    shown = "".join(f["text"] for b in blocks for f in b.get("fields", ()))
    assert "*Resumes from*" in shown and "*May decide*" in shown
