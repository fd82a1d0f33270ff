"""Resume and prove: first healthy step, loss parity, rollback or page as the runbook says."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lifeboat_dr.core.resume import (
    ParityOutcome,
    ResumeFailed,
    loss_parity,
    parse_loaded,
    parse_losses,
    wait_first_step,
)
from lifeboat_dr.providers.compute.base import PlanOption
from lifeboat_dr.providers.compute.fake import FakeClock
from lifeboat_dr.standins.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
PRE = {s: 1.0 + 1.0 / s for s in range(1, 41)}


def test_identical_losses_pass_and_name_how_many_steps_were_compared():
    result = loss_parity(PRE, dict(PRE), resumed_from=20, steps=5, tolerance=0.0)
    assert result.passed and result.compared == 5 and result.worst_rel_diff == 0.0


def test_a_diverging_step_fails_the_gate_and_is_named():
    resumed = dict(PRE) | {23: PRE[23] * 1.05}
    result = loss_parity(PRE, resumed, resumed_from=20, steps=5, tolerance=0.01)
    assert not result.passed and result.worst_step == 23 and "step 23" in result.detail
    assert loss_parity(PRE, resumed, resumed_from=20, steps=5, tolerance=0.06).passed


def test_a_nan_loss_fails_the_gate():
    result = loss_parity(PRE, dict(PRE) | {21: math.nan}, resumed_from=20, steps=3, tolerance=0.5)
    assert not result.passed and result.worst_step == 21


def test_steps_the_resumed_job_has_not_logged_fail_the_gate():
    resumed = {s: PRE[s] for s in (21, 22)}
    result = loss_parity(PRE, resumed, resumed_from=20, steps=5, tolerance=0.0)
    assert not result.passed and result.missing == (23, 24, 25)


def test_steps_the_primary_never_reached_are_not_compared():
    pre = {s: PRE[s] for s in range(1, 23)}  # the primary died at step 22
    result = loss_parity(pre, dict(PRE), resumed_from=20, steps=5, tolerance=0.0)
    assert result.passed and result.compared == 2
    died_at_checkpoint = loss_parity({s: PRE[s] for s in range(1, 21)}, dict(PRE), 20, 5, 0.0)
    assert not died_at_checkpoint.passed and died_at_checkpoint.compared == 0  # 0 compared: never a pass
    assert died_at_checkpoint.outcome is ParityOutcome.not_provable


def test_parse_losses_skips_noise_and_keeps_the_latest_line_per_step():
    text = 'loading...\n{"step": 3, "loss": 2.5}\nnot json {"loss"\n{"step": 3, "loss": 2.25, "ts": 1}\n'
    assert parse_losses(text) == {3: 2.25}


def test_parse_loaded_timestamps_the_last_checkpoint_load_and_ignores_noise():
    text = (
        'NCCL init\n{"event": "loaded", "step": 30, "ts": 1767225600.5}\n{"step": 31, "loss": 1.0}\n'
        '{"event": "loaded", "step": "x", "ts": 1}\n{"event": "loaded", "step": 20, "ts": 1767225660}\n'
    )
    step, at = parse_loaded(text)
    assert step == 20 and at == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert parse_loaded('{"step": 31, "loss": 1.0}\n') is None
    assert parse_losses(text) == {31: 1.0}  # the event line is not a loss


def test_trainer_says_when_it_has_loaded_its_resume_checkpoint(tmp_path):
    Trainer(tmp_path / "ckpt", tmp_path / "loss.jsonl").run(10, 5)
    assert parse_loaded((tmp_path / "loss.jsonl").read_text()) is None  # a fresh start loads nothing
    Trainer(tmp_path / "ckpt", tmp_path / "loss.jsonl").run(
        8, 5, resume=str(tmp_path / "ckpt" / "step-00000005")
    )
    step, at = parse_loaded((tmp_path / "loss.jsonl").read_text())
    lines = (tmp_path / "loss.jsonl").read_text().splitlines()
    loaded = next(i for i, x in enumerate(lines) if '"loaded"' in x)
    assert step == 5 and json.loads(lines[loaded + 1])["step"] == 6  # before the first resumed step
    assert at.timestamp() <= json.loads(lines[loaded + 1])["ts"]


def test_first_step_wait_times_out_on_a_hung_job():
    clock = FakeClock()
    with pytest.raises(ResumeFailed, match="within 600s"):
        wait_first_step(
            lambda: "NCCL init...\n", 20, timeout_s=600, clock=clock, sleep=clock.sleep, poll_s=30
        )
    assert clock.now >= 600


def test_first_step_wait_fails_fast_when_the_job_dies_or_logs_nan():
    with pytest.raises(ResumeFailed, match="stopped"):
        wait_first_step(lambda: "Traceback...\n", 20, timeout_s=600, job_alive=lambda: False)
    with pytest.raises(ResumeFailed, match="non-finite"):
        wait_first_step(lambda: '{"step": 21, "loss": NaN}\n', 20, timeout_s=600)
    first = wait_first_step(lambda: '{"step": 20, "loss": 1}\n{"step": 21, "loss": 0.5}\n', 20, timeout_s=1)
    assert (first.step, first.loss) == (21, 0.5)


# --- end to end with the demo trainer on LocalCompute -------------------------------------

LOCAL = PlanOption(infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0)
