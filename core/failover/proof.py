"""How a failover proves the checkpoint it resumes from, without giving up that checkpoint.

The job always resumes from the newest certified checkpoint. Its proof is, in order:

1. **its own steps**: the resumed job's first `parity_steps` losses against the pre-failure
   log, when that log holds enough of them (`parity_min_coverage` of the steps asked);
2. **a replay beside it**, when it does not (the primary died at, or just after, the newest
   checkpoint: the usual case when the loss log travels with the checkpoints): the same job
   and code, from the *previous* certified checkpoint, on a second cluster of the same plan
   (`<cluster>-proof`), run until it has logged the `parity_steps` steps after that
   checkpoint (the pre-failure log holds them: the primary trained past them to the newest),
   then torn down. It writes into a scratch folder (`LIFEBOAT_AUDIT_DIR`, as the checkpoint
   audit's job does), never into the stores. It starts once the resumed job has logged its
   first step, so it costs no RTO; it costs the plan's $/h for its launch, load and steps,
   and the failover completes (its proof recorded) only when it has;
3. **not provable**, when neither has anything to compare: recorded as such, never a pass,
   and never a reason to roll back.

A mismatch of the job's own steps leads to the runbook's `on_parity_failure` (a rollback
to the previous certified checkpoint, or a page); a mismatch in the replay pages, and the
job keeps its progress unless `on_parity_failure` is `page` (stop). `plan_proof` says which
proof a failover will use before the approval, for the card.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lifeboat_dr.core.resume import ParityOutcome, ParityResult, loss_parity, parse_losses
from lifeboat_dr.kernel.errors import LifeboatError
from lifeboat_dr.providers.compute.base import Compute, JobSpec, PlanOption

AUDIT_DIR_ENV = "LIFEBOAT_AUDIT_DIR"  # the job writes its checkpoints, loss log and heartbeat there


def proof_cluster(cluster: str) -> str:
    return f"{cluster}-proof"


@dataclass(frozen=True)
class ProofPlan:
    """Which proof the failover will use (`how`: own | replay | none), in one line for the card."""

    resume_step: int
    how: str
    replay_step: int | None
    line: str
    resumes: str | None = None  # what the card says it resumes from, when not simply `resume_step`


def _enough(pre: Mapping[int, float], step: int, steps: int, min_coverage: float) -> ParityResult:
    """What the pre-failure log alone allows after `step`: the log against itself."""
    return loss_parity(pre, pre, step, steps, 0.0, min_coverage=min_coverage)


def plan_proof(
    pre: Mapping[int, float], newest: int, older: int | None, steps: int, min_coverage: float
) -> ProofPlan:
    """The proof a resume from `newest` gets, `older` the previous certified checkpoint."""
    if steps <= 0:
        return ProofPlan(newest, "none", None, "not provable: loss parity disabled (parity_steps: 0)")
    own = _enough(pre, newest, steps, min_coverage)
    if own.passed:
        return ProofPlan(
            newest,
            "own",
            None,
            f"its first {steps} step(s) against the pre-failure log ({own.compared} logged after step {newest})",
        )
    if older is not None and _enough(pre, older, steps, min_coverage).passed:
        return ProofPlan(
            newest,
            "replay",
            older,
            f"a replay of step {older} beside it ({steps} step(s) on a second cluster of the plan, "
            f"after the first step: no RTO): the pre-failure log has {own.compared} usable step(s) after {newest}",
        )
    why = "no older certified checkpoint" if older is None else f"nor after {older}"
    return ProofPlan(
        newest,
        "none",
        None,
        f"not provable: the pre-failure log has {own.compared} usable step(s) after {newest}, {why}",
    )


def replay(
    compute: Compute,
    cluster: str,
    option: PlanOption,
    job: JobSpec,
    older: int,
    pre: Mapping[int, float],
    *,
    steps: int,
    tolerance: float,
    min_coverage: float,
    timeout_s: float,
    scratch: str,
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ParityResult:
    """Replay `job` (resuming from the checkpoint at step `older`) on `cluster`, launched on
    `option`, until it has logged the steps after `older` the pre-failure log holds (or
    stopped, or `timeout_s` passed); compare; tear the cluster down whatever happens. A
    replay that cannot run (no capacity, a launch error) is not provable, with the reason."""
    wanted = [s for s in range(older + 1, older + steps + 1) if s in pre]
    job = dataclasses.replace(job, env={**job.env, AUDIT_DIR_ENV: scratch})
    try:
        compute.launch(cluster, option, job)
        deadline = clock() + timeout_s
        while True:
            logged = parse_losses(compute.logs(cluster))
            if all(s in logged for s in wanted) or compute.status(cluster).job.finished or clock() > deadline:
                break
            sleep(poll_s)
        result = loss_parity(pre, logged, older, steps, tolerance, min_coverage=min_coverage)
        if result.outcome is ParityOutcome.mismatch and result.missing and len(result.missing) == len(wanted):
            # it logged none of them: it never ran, which says nothing of the checkpoints
            result = dataclasses.replace(
                result,
                outcome=ParityOutcome.not_provable,
                detail=f"the replay logged no step: {result.detail}",
            )
    except LifeboatError as e:
        result = ParityResult(
            ParityOutcome.not_provable, 0, f"the replay could not run: {type(e).__name__}: {e}", asked=steps
        )
    try:
        compute.teardown(cluster)
    except LifeboatError as e:  # said, not raised: the proof must not fail the resumed job's run
        result = dataclasses.replace(result, detail=f"{result.detail}; {cluster} NOT torn down: {e}")
    return dataclasses.replace(result, replayed_from=older)
