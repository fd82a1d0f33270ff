"""Resume on the secondary and prove it: first healthy step, then loss parity.

A resumed job is trusted only once it (1) loads the certified checkpoint and logs a finite
loss for a step after it, within `verify.first_step_timeout`, and (2) logs, for the first
`verify.parity_steps` steps after the checkpoint, losses equal to the pre-failure run's at
the same steps within `verify.parity_tolerance` (relative). A deterministic job resumed from
the right weights reproduces them; wrong weights, a wrong data order or a silent
corruption do not. On a failed gate the runbook says: roll back to the previous certified
checkpoint, or stop and page.

Losses are read as JSON lines `{"step": int, "loss": float, ...}` from any text (the job's
log, a loss-log file); other lines are ignored. A job may also log
`{"event": "loaded", "step": int, "ts": epoch}` once its resume checkpoint is loaded
(the demo trainer does), which `parse_loaded` reads for the RTO ledger. Plain functions
over plain data; the failover flow (`flows/failover.py`) decides what a failed gate does.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from lifeboat_dr.kernel.errors import StopFailover


class ResumeFailed(StopFailover):
    """The resumed job died, or never logged a healthy step in time."""


def parse_losses(text: str) -> dict[int, float]:
    """`step -> loss` from JSON lines in `text`; the last line for a step wins (a restarted
    primary re-logs the steps after its checkpoint, and the latest lineage is the one that
    produced the replicated checkpoints)."""
    out: dict[int, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"loss"' in line):
            continue
        try:
            rec = json.loads(line)
            out[int(rec["step"])] = float(rec["loss"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def parse_loaded(text: str) -> tuple[int, datetime] | None:
    """`(step, when)` of the last `{"event": "loaded", ...}` line in `text`, or None when the
    job has not said it loaded a checkpoint (yet, or ever: not every job logs it). The last
    line wins: a restarted job (a rollback) loads again."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"loaded"' in line):
            continue
        try:
            rec = json.loads(line)
            if rec.get("event") == "loaded":
                found = (int(rec["step"]), datetime.fromtimestamp(float(rec["ts"]), UTC))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, OSError):
            continue
    return found


@dataclass(frozen=True)
class FirstStep:
    step: int
    loss: float
    at: datetime  # when we saw it
    waited_s: float


def wait_first_step(
    read_log: Callable[[], str],
    after_step: int,
    *,
    timeout_s: float,
    job_alive: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.5,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> FirstStep:
    """Wait for the first step after `after_step` with a finite loss.

    Raises `ResumeFailed` when the job stops without one, logs a NaN/inf loss first, or the
    timeout passes (a hung NCCL init, a checkpoint that takes forever to load)."""
    start = clock()
    while True:
        alive = job_alive()  # read before the log: a job that exits after logging still counts
        losses = {s: v for s, v in parse_losses(read_log()).items() if s > after_step}
        if losses:
            step = min(losses)
            if not math.isfinite(losses[step]):
                raise ResumeFailed(f"first resumed step {step} logged a non-finite loss ({losses[step]})")
            return FirstStep(step, losses[step], now(), clock() - start)
        if not alive:
            raise ResumeFailed(f"the resumed job stopped before logging a step after {after_step}")
        if clock() - start >= timeout_s:
            raise ResumeFailed(f"no healthy step after {after_step} within {timeout_s:g}s")
        sleep(poll_s)


class ParityOutcome(StrEnum):
    """What a loss-parity proof found. Only a mismatch is evidence against the checkpoint."""

    passed = "passed"  # enough steps compared (coverage), all within tolerance
    mismatch = "mismatch"  # a compared step outside tolerance, non-finite, or never logged
    not_provable = "not provable"  # nothing (or too little) to compare: no evidence either way


@dataclass(frozen=True)
class ParityResult:
    outcome: ParityOutcome
    compared: int  # steps present, finite, in both logs
    detail: str
    worst_step: int | None = None
    worst_rel_diff: float = 0.0
    missing: tuple[int, ...] = ()  # expected steps the resumed job has not logged
    asked: int = 0  # `parity_steps`: coverage is compared of asked
    replayed_from: int | None = None  # the proof came from a replay of this older checkpoint

    @property
    def passed(self) -> bool:
        return self.outcome is ParityOutcome.passed

    @property
    def coverage(self) -> float:
        return self.compared / self.asked if self.asked else 0.0

    def summary(self) -> str:
        """One line for the ledger, the card's update and the report: outcome, coverage, how."""
        how = f" by a replay of step {self.replayed_from}" if self.replayed_from is not None else ""
        return f"{self.outcome.value}{how} ({self.compared} of {self.asked} compared): {self.detail}"


def loss_parity(
    pre_failure: Mapping[int, float],
    resumed: Mapping[int, float],
    resumed_from: int,
    steps: int,
    tolerance: float,
    *,
    min_coverage: float = 0.0,
) -> ParityResult:
    """Compare steps `resumed_from+1 .. resumed_from+steps` where the pre-failure log has them.

    Relative difference |a-b| / max(|a|, 1e-12). Steps the primary never reached are not
    compared (it died first), nor steps it logged as NaN/inf (a faulty GPU's last step proves
    nothing, and must not hide the steps after it). A resumed NaN/inf where the primary
    logged a number, a step outside `tolerance`, or a step the resumed job never logged, is a
    mismatch. With no mismatch, fewer than `min_coverage` of the `steps` asked compared (none
    at all, or `parity_steps: 0`) is not provable: never a pass."""
    if steps <= 0:
        return ParityResult(ParityOutcome.not_provable, 0, "loss parity disabled (parity_steps: 0)")
    window = range(resumed_from + 1, resumed_from + steps + 1)
    span = f"{window.start}..{window.stop - 1}"
    logged = [s for s in window if s in pre_failure]
    expected = [s for s in logged if math.isfinite(pre_failure[s])]
    unusable = (
        f"; non-finite before the failure at {sorted(set(logged) - set(expected))}"
        if len(logged) > len(expected)
        else ""
    )
    if not expected:
        return ParityResult(
            ParityOutcome.not_provable,
            0,
            f"the pre-failure log has no usable step in {span}{unusable}",
            asked=steps,
        )
    missing = tuple(s for s in expected if s not in resumed)
    worst_step, worst = None, -1.0
    for s in expected:
        if s in resumed:
            a, b = pre_failure[s], resumed[s]
            rel = abs(a - b) / max(abs(a), 1e-12) if math.isfinite(b) else math.inf
            if rel > worst:
                worst_step, worst = s, rel
    worst = max(worst, 0.0)
    compared = len(expected) - len(missing)
    if missing:
        return ParityResult(
            ParityOutcome.mismatch,
            compared,
            f"resumed log lacks step(s) {list(missing)}",
            worst_step,
            worst,
            missing,
            asked=steps,
        )
    if worst > tolerance:
        return ParityResult(
            ParityOutcome.mismatch,
            compared,
            f"step {worst_step}: loss {resumed[worst_step]!r} vs {pre_failure[worst_step]!r} before the "
            f"failure, {worst:.3g} relative > tolerance {tolerance:g}",
            worst_step,
            worst,
            asked=steps,
        )
    within = f"{compared} step(s) in {span} within {tolerance:g} (worst {worst:.3g} at step {worst_step}){unusable}"
    if compared / steps < min_coverage:
        return ParityResult(
            ParityOutcome.not_provable,
            compared,
            f"{compared} of {steps} asked step(s) compared, below the runbook's minimum coverage "
            f"{min_coverage:g} ({within})",
            worst_step,
            worst,
            asked=steps,
        )
    return ParityResult(ParityOutcome.passed, compared, within, worst_step, worst, asked=steps)


TRAINING = ("pretraining", "finetuning")


def parity_warnings(workload: str, parity_steps: int, min_coverage: float) -> list[str]:
    """What `lifeboat validate` says of a runbook's parity settings (it still loads)."""
    if workload in TRAINING and parity_steps == 0:
        return [
            f"verify.parity_steps is 0 on a {workload} runbook: no failover will prove its resumed "
            "losses (every one is recorded 'not provable'); name verify.loss_log and set parity_steps"
        ]
    if workload in TRAINING and math.ceil(parity_steps * min_coverage) < 2:
        return [
            f"verify.parity_steps {parity_steps} with parity_min_coverage {min_coverage:g}: one compared "
            "step is enough for a pass"
        ]
    return []
