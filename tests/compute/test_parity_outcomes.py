"""Loss parity has three outcomes, kept apart: passed, mismatch, not provable (issues #29, #34).

A non-finite pre-failure loss (a GPU fault put NaN into the last logged step) proves nothing
and must never hide the steps after it; a resumed job that logs NaN where the primary logged a
number has diverged. Too few steps compared (below the runbook's minimum coverage) is not a pass."""

from __future__ import annotations

import math

from lifeboat_dr.core.resume import ParityOutcome, loss_parity

PRE = {s: 1.0 + 1.0 / s for s in range(1, 61)}


def test_a_nan_before_the_failure_does_not_hide_a_resumed_run_99x_off():
    # issue #29: {"step":41,"loss":NaN} before the failure, the resumed run x99 off at 43-45
    pre = dict(PRE) | {41: math.nan}
    resumed = dict(PRE) | {s: PRE[s] * 99 for s in (43, 44, 45)}
    result = loss_parity(pre, resumed, resumed_from=40, steps=5, tolerance=0.01)
    assert result.outcome is ParityOutcome.mismatch and not result.passed
    assert result.worst_step in (43, 44, 45) and math.isfinite(result.worst_rel_diff)


def test_a_non_finite_pre_failure_loss_is_not_compared_and_alone_is_not_provable():
    pre = {s: PRE[s] for s in range(1, 41)} | {41: math.inf}  # the last logged step: inf
    result = loss_parity(pre, dict(PRE), resumed_from=40, steps=5, tolerance=0.0)
    assert result.outcome is ParityOutcome.not_provable and not result.passed
    assert result.compared == 0 and "non-finite" in result.detail


def test_a_resumed_nan_where_the_primary_logged_a_number_is_a_mismatch():
    result = loss_parity(PRE, dict(PRE) | {22: math.nan}, resumed_from=20, steps=5, tolerance=0.5)
    assert result.outcome is ParityOutcome.mismatch and result.worst_step == 22


def test_coverage_is_compared_of_asked_and_below_the_minimum_is_not_provable():
    pre = {s: PRE[s] for s in range(1, 22)}  # the primary died 1 step after the checkpoint
    one_of_twenty = loss_parity(pre, dict(PRE), resumed_from=20, steps=20, tolerance=0.0, min_coverage=0.5)
    assert (one_of_twenty.compared, one_of_twenty.asked) == (1, 20) and one_of_twenty.coverage == 0.05
    assert one_of_twenty.outcome is ParityOutcome.not_provable
    assert "1 of 20" in one_of_twenty.detail and "0.5" in one_of_twenty.detail
    enough = loss_parity(PRE, dict(PRE), resumed_from=20, steps=20, tolerance=0.0, min_coverage=0.5)
    assert enough.outcome is ParityOutcome.passed and enough.coverage == 1.0


def test_a_mismatch_counts_whatever_the_coverage():
    pre = {s: PRE[s] for s in range(1, 22)}
    result = loss_parity(
        pre, dict(PRE) | {21: 5.0}, resumed_from=20, steps=20, tolerance=0.0, min_coverage=0.5
    )
    assert result.outcome is ParityOutcome.mismatch


def test_nothing_to_compare_is_not_provable_never_a_mismatch():
    died_at_checkpoint = loss_parity({s: PRE[s] for s in range(1, 21)}, dict(PRE), 20, 5, 0.0)
    assert died_at_checkpoint.outcome is ParityOutcome.not_provable
    disabled = loss_parity(PRE, dict(PRE), 20, 0, 0.0)
    assert disabled.outcome is ParityOutcome.not_provable and "parity_steps: 0" in disabled.detail
