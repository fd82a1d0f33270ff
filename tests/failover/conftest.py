"""What the failover tests share: a gate that approves (or rejects) at once. The runbook of a
walk over `ScriptedSteps` is `lifeboat_dr.testing.failover_steps.scripted_runbook`."""

from __future__ import annotations

from lifeboat_dr.providers.chat.base import ApprovalDecision


class Gate:
    """An approval gate that decides at once; keeps the cards it was shown and the notes."""

    def __init__(self, approve=True):
        self.approve, self.cards, self.notes = approve, [], []

    def request(self, card, ledger):
        self.cards.append(card)
        ledger.mark("approval_requested")
        if self.approve:
            ledger.mark("approval_granted")
        else:
            ledger.fail("approval_granted", "rejected by U1", outcome="aborted")
        return ApprovalDecision(approved=self.approve, reason="looks right", approver="U1")

    def notify(self, text):
        self.notes.append(text)

    def announce(self):
        pass
