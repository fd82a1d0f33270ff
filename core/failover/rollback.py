"""The rollback policy: what a failed loss-parity proof leads to.

proof passed ─────────────────────────────► done
proof failed, on_parity_failure=rollback ─► roll back once to the previous certified
                                            checkpoint, resume and prove again
proof failed again, or on_parity_failure=page ─► page and stop
"""

from __future__ import annotations

from enum import Enum

from lifeboat_dr.core.resume import ParityResult


class ParityDecision(Enum):
    """What follows a proof."""

    passed = "passed"
    rollback = "rollback"
    stop = "stop"


def after_proof(parity: ParityResult, attempt: int, on_parity_failure: str) -> ParityDecision:
    """`attempt` counts resumes so far (1 = the first)."""
    if parity.passed:
        return ParityDecision.passed
    if on_parity_failure == "page" or attempt >= 2:
        return ParityDecision.stop
    return ParityDecision.rollback
