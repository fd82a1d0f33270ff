from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.ledger import RtoLedger

OUTAGE = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


class StepClock:
    """An injected clock the test moves by hand."""

    def __init__(self, start: datetime = OUTAGE):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock():
    return StepClock()


def replay_failover(
    ledger: RtoLedger, clock: StepClock, *, provision_s: float = 300, fail_at: str | None = None
):
    """A failover as the flow records it: certify, plan and prestage run concurrently."""
    ledger.mark("outage_start")
    ledger.checkpoint("s3://ckpt/run/step-1200", OUTAGE - timedelta(minutes=12))
    clock.advance(60)
    ledger.mark("detected")
    clock.advance(30)
    ledger.mark("confirmed")
    clock.advance(2)
    ledger.mark("fenced")
    for p in ("certified", "planned", "prestaged"):
        ledger.begin(p)
    clock.advance(8)
    ledger.mark("planned")
    clock.advance(20)
    ledger.mark("certified")
    ledger.mark("approval_requested")
    clock.advance(45)
    ledger.mark("approval_granted")
    ledger.note("approved by", "U0ALICE via slack")
    clock.advance(60)
    ledger.mark("prestaged")
    if fail_at == "provisioned":
        clock.advance(10)
        ledger.fail("provisioned", RuntimeError("no H100 capacity in any candidate"))
        return ledger.entry
    clock.advance(provision_s - 60)
    ledger.mark("provisioned")
    clock.advance(40)
    ledger.mark("checkpoint_loaded")
    clock.advance(15)
    ledger.mark("first_step")
    clock.advance(30)
    ledger.mark("parity_passed")
    return ledger.finish()
