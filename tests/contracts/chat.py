"""The Chat contract: what every chat backend promises the approval gate.

A backend's test class inherits `ChatContract` and provides two fixtures: `chat` (the backend)
and `shown` (a function returning everything people have been shown so far, as text).
"""

from __future__ import annotations

from lifeboat_dr.providers.chat.base import ApprovalCard, CardRef, Chat


def card(**kw) -> ApprovalCard:
    from datetime import timedelta

    fields = dict(
        runbook="llama-pretrain",
        run_id="8d4c1a52-0000-4000-8000-000000000001",
        channel="C0INCIDENT",
        evidence=["gpu_health: XID 79 on node-7", "provider: aws/us-east-1 timing out"],
        checkpoint="gs://ckpt-dr/llama/step-120000 (step 120000)",
        rpo=timedelta(minutes=12),
        rpo_target=timedelta(minutes=30),
        plan="gcp/us-central1 a3-highgpu-8g H100:8 on-demand",
        cost_per_hour=88.49,
        prestage=["ready: 1 image, 1 weights set"],
        expected_rto=timedelta(minutes=14),
        rto_target=timedelta(minutes=30),
        approvers=["U0ALICE"],
    )
    return ApprovalCard(**(fields | kw))


class ChatContract:
    def test_is_a_chat(self, chat):
        assert isinstance(chat, Chat)

    def test_the_posted_card_shows_every_fact_an_approver_needs(self, chat, shown):
        ref = chat.post_card(card())
        assert isinstance(ref, CardRef) and ref.ts
        text = shown()
        for needle in (
            "XID 79",
            "step-120000",
            "12m",
            "30m",
            "a3-highgpu-8g",
            "88.49",
            "ready: 1 image",
            "14m",
        ):
            assert needle in text, needle

    def test_a_drill_card_says_it_is_a_drill(self, chat, shown):
        chat.post_card(card(drill=True))
        assert "drill" in shown().lower()

    def test_the_outcome_replaces_the_question(self, chat, shown):
        ref = chat.post_card(card())
        chat.update_card(ref, card(), "Approved by U0ALICE via slack: replica certified")
        assert "Approved by U0ALICE" in shown()

    def test_messages_and_private_replies_reach_people(self, chat, shown):
        ref = chat.post_card(card())
        chat.post("C0INCIDENT", "Escalating: nobody approved yet", thread=ref)
        chat.ephemeral("C0INCIDENT", "U0MALLORY", "you are not an approver for llama-pretrain")
        text = shown()
        assert "Escalating" in text and "not an approver" in text

    def test_waiting_backends_give_no_answer_of_their_own(self, chat):
        assert chat.answer(card()) is None  # the gate then waits for a person
