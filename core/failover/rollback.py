"""The rollback policy: what a loss-parity proof leads to. Only a mismatch is evidence
against the checkpoint the job resumed from; nothing to compare is not.

passed ─────────────────────────────────────────► done
not provable (nothing, or too little, compared) ─► done: recorded so, people told; the job
                                                   keeps training from the newest checkpoint
mismatch of the job's own steps,
    on_parity_failure=rollback ─────────────────► roll back once to the previous certified
                                                   checkpoint, resume and prove again
mismatch in the replay beside it, on_parity_failure=rollback ─► page; the job keeps its progress
a mismatch again, or on_parity_failure=page ────► page and stop
"""

from __future__ import annotations

from enum import Enum

from lifeboat_dr.core.resume import ParityOutcome, ParityResult


class ParityDecision(Enum):
    """What follows a proof."""

    passed = "passed"
    unproven = "unproven"  # not provable: the job goes on, the record and the people say so
    page = "page"  # the replay beside the job mismatched: page, the job goes on
    rollback = "rollback"
    stop = "stop"


def after_proof(parity: ParityResult, attempt: int, on_parity_failure: str) -> ParityDecision:
    """`attempt` counts resumes so far (1 = the first)."""
    if parity.outcome is ParityOutcome.passed:
        return ParityDecision.passed
    if parity.outcome is ParityOutcome.not_provable:
        return ParityDecision.unproven
    if on_parity_failure == "page":
        return ParityDecision.stop
    if parity.replayed_from is not None:
        return ParityDecision.page
    return ParityDecision.stop if attempt >= 2 else ParityDecision.rollback
