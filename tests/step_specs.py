"""The smallest `StepSpec` a test of the failover steps needs: a manifest checkpoint, no
candidates, no parity, an empty quorum, nothing to prestage; each test names what it is about."""

from __future__ import annotations

from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.failover.steps import StepSpec


def bare_spec(**overrides) -> StepSpec:
    values = dict(
        layout="manifest",
        blocked=(),
        candidates=(),
        provision_budget_s=1,
        first_step_timeout_s=1,
        parity_steps=0,
        parity_tolerance=0,
        job=lambda uri: None,
        quorum=QuorumPolicy(signals=()),
        probes=lambda: (),
        prestage=lambda: None,
        runbook="trainer",
    )
    return StepSpec(**(values | overrides))
