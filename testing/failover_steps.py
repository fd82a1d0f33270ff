"""`ScriptedSteps`: the fake `FailoverSteps`, whose steps take scripted times and give scripted results.

For the failover benchmark (measured RTO against the step graph's critical path) and for
tests of the flow's own logic: ordering, concurrency, rejection, rollback, teardown.
`scripted_runbook` is the runbook such a walk runs under.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.certify import Certified, CertifyReport
from lifeboat_dr.core.failover.contract import Confirmation, Fenced, Provisioned, Resumed
from lifeboat_dr.core.failover.proof import ProofPlan
from lifeboat_dr.core.prestage import PrestageReadiness
from lifeboat_dr.core.resume import ParityOutcome, ParityResult
from lifeboat_dr.kernel.errors import StandDown, StopFailover
from lifeboat_dr.providers.compute.base import PlanOption
from lifeboat_dr.runbooks.model import Runbook

SCRIPTED_RUNBOOK = {
    "name": "job-a",
    "workload": "finetuning",
    "primary": {"infra": "aws/us-east-1", "store": "s3://p/ck"},
    "secondary": {
        "infra": "gcp/us-central1",
        "store": "gs://s/ck",
        "candidates": [{"infra": "gcp/us-central1"}],
    },
    "job": {"task": "task.yaml"},
    "checkpoint": {"cadence": "30m"},
    "failover": {"retries": 0},
}


def scripted_runbook(**sections) -> Runbook:
    """A valid runbook for a walk over `ScriptedSteps`, whose steps touch none of its sites:
    only its settings (approval, failover) count. `sections` replace whole top-level ones."""
    return Runbook.model_validate({**SCRIPTED_RUNBOOK, **sections})


class ScriptedSteps:
    """Each step sleeps `durations[step]` seconds. `parity` lists the outcome of each proof in
    turn; `failing` maps a step to the exception it raises."""

    def __init__(
        self,
        durations: Mapping[str, float],
        *,
        checkpoints: Sequence[int] = (300, 200, 100),
        parity: Sequence[bool | ParityOutcome] = (True,),
        failing: Mapping[str, BaseException] | None = None,
        outage_started_at: datetime | None = None,
        taken_before: Sequence[str] = (),
    ):
        self.durations = dict(durations)
        self.checkpoints = sorted(checkpoints, reverse=True)
        self.parity = list(parity)
        self.failing = dict(failing or {})
        self.outage_started_at = outage_started_at  # default: `detect` seconds before confirm starts
        self.calls: list[tuple[str, float, float]] = []  # (step, start, end) in monotonic seconds
        self.clusters: set[str] = set()
        self.rechecks: list[str] = []  # acting steps re-checked, in order
        self.taken_before = set(taken_before)  # acting steps before which another run "took" the job
        self.resumed: list[Resumed] = []  # every resume, in order
        self._lock = threading.Lock()
        self._epoch = 0

    def _run(self, step: str) -> None:
        start = time.monotonic()
        time.sleep(self.durations.get(step, 0.0))
        with self._lock:
            self.calls.append((step, start, time.monotonic()))
        if step in self.failing:
            raise self.failing[step]

    def confirm(self) -> Confirmation:
        if self.outage_started_at is None:
            self.outage_started_at = datetime.now(UTC) - timedelta(seconds=self.durations.get("detect", 0.0))
        self._run("confirm")
        detected = self.outage_started_at + timedelta(seconds=self.durations.get("detect", 0.0))
        return Confirmation(
            self.outage_started_at, detected, ("scripted: provider unreachable", "scripted: stall")
        )

    def fence(self, checkpoint: CertifyReport | None = None) -> Fenced:
        self._run("fence")
        self._epoch = self._epoch or 2
        return Fenced(self._epoch, ("memory://secondary",), primary_stopped=True)

    def certify(self, older_than: int | None = None) -> CertifyReport:
        self._run("certify")
        for step in self.checkpoints:
            if older_than is None or step < older_than:
                written = self.outage_started_at - timedelta(minutes=10 + (self.checkpoints[0] - step) / 10)
                return _report(
                    Certified(step, f"memory://secondary/step-{step:06d}", written, "scripted", {})
                )
        raise StopFailover(f"no certified checkpoint older than step {older_than}")

    def plan(self) -> tuple[PlanOption, ...]:
        self._run("plan")
        return (
            PlanOption("gcp/us-central1", "a3-highgpu-8g", "H100:8", False, 88.49, rank=0),
            PlanOption("aws/us-west-2", "p5.48xlarge", "H100:8", False, 98.32, rank=1),
        )

    def prestage(self) -> PrestageReadiness:
        self._run("prestage")
        return PrestageReadiness(True, (), ())

    def provision(self, options: Sequence[PlanOption]) -> Provisioned:
        self._run("provision")
        with self._lock:
            self.clusters.add("scripted-dr")
        return Provisioned("scripted-dr", options[0], (f"{options[0].infra}: ok",))

    def resume(self, cluster: Provisioned, checkpoint: CertifyReport) -> Resumed:
        start = datetime.now(UTC)
        self._run("load")
        loaded = datetime.now(UTC)
        self._run("first_step")
        self.resumed.append(
            Resumed(loaded if loaded > start else start, datetime.now(UTC), checkpoint.certified.step + 1)
        )
        return self.resumed[-1]

    def plan_proof(self, checkpoint: CertifyReport) -> ProofPlan:
        step = checkpoint.certified.step
        return ProofPlan(
            step, "own", None, f"its first 5 step(s) against the pre-failure log (5 logged after step {step})"
        )

    def prove(self, cluster: Provisioned, checkpoint: CertifyReport) -> ParityResult:
        """`parity` entries: True (passed), False (a mismatch of the job's own steps), or a
        `ParityOutcome` (not provable; a mismatch)."""
        self._run("prove")
        scripted = self.parity.pop(0) if self.parity else True
        outcome = (
            scripted
            if isinstance(scripted, ParityOutcome)
            else (ParityOutcome.passed if scripted else ParityOutcome.mismatch)
        )
        detail = {
            ParityOutcome.passed: "5 steps identical",
            ParityOutcome.mismatch: "step 301: 2.31 vs 2.29",
            ParityOutcome.not_provable: "the pre-failure log has no usable step in 301..305",
        }[outcome]
        compared = 0 if outcome is ParityOutcome.not_provable else 5
        return ParityResult(outcome, compared, detail, asked=5)

    def still_there(self, checkpoint: CertifyReport) -> bool:
        return True

    def fence_read_back(self) -> str | None:
        return f"epoch {self._epoch} on memory://secondary" if self._epoch else None

    def recheck(self, step: str) -> None:
        with self._lock:
            self.rechecks.append(step)
        if step in self.taken_before:
            raise StandDown(f"before {step}: scripted: another failover took the job")

    def teardown(self, cluster: Provisioned) -> None:
        with self._lock:
            self.clusters.discard(cluster.cluster)


def _report(certified: Certified) -> CertifyReport:
    return CertifyReport(
        replica="memory://secondary",
        source=None,
        at=certified.written_at,
        layout="manifest",
        mode="scripted",
        certified=certified,
        rejected=[],
        rpo=None,
        replication_lag=None,
        newest_source_step=certified.step,
        source_error=None,
        calls={},
        object_bytes_read=0,
        metadata_bytes_read=0,
    )
