"""The failover as a step graph: the results each step hands on, and what the flow drives.

    confirm ─► fence ─┬─► certify ──┐
                      ├─► plan ─────┼─► approval ─► provision ─► resume ─► prove ─► record
                      └─► prestage ─┘

`FailoverSteps` is what the `failover` flow needs from the world; `flows/wiring.py` builds
it from a runbook's providers, benchmarks and tests script it. Nothing here imports Prefect
or a cloud SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from lifeboat.prestage import PrestageReadiness
from providers.compute.base import PlanOption

# step -> the steps it waits for (approval waits for all three branches).
STEP_GRAPH: Mapping[str, tuple[str, ...]] = {
    "detect": (),
    "confirm": ("detect",),
    "fence": ("confirm",),
    "certify": ("fence",),
    "plan": ("fence",),
    "prestage": ("fence",),
    "approval": ("certify", "plan", "prestage"),
    "provision": ("approval",),
    "load": ("provision",),
    "first_step": ("load",),
}


def step_graph(provision_before_approval: bool = False) -> Mapping[str, tuple[str, ...]]:
    """The graph the flow walks; with early provisioning, GPUs are sought once planned and
    the job loads when both the GPUs and the approval are there."""
    if not provision_before_approval:
        return STEP_GRAPH
    return {**STEP_GRAPH, "provision": ("plan",), "load": ("provision", "approval")}


def critical_path(durations: Mapping[str, float], graph: Mapping[str, Sequence[str]] = STEP_GRAPH) -> float:
    """Longest path through the step graph: the best RTO concurrency can give."""
    finish: dict[str, float] = {}

    def end(step: str) -> float:
        if step not in finish:
            finish[step] = max((end(d) for d in graph[step]), default=0.0) + durations.get(step, 0.0)
        return finish[step]

    return max(end(s) for s in graph)


@dataclass(frozen=True)
class Confirmation:
    """The outage as detection saw it."""

    outage_started_at: datetime
    detected_at: datetime
    evidence: tuple[str, ...]  # one line per agreeing signal


@dataclass(frozen=True)
class Fenced:
    epoch: int
    stores: tuple[str, ...]  # where the lease was bumped
    primary_stopped: bool


@dataclass(frozen=True)
class Certified:
    """The checkpoint the secondary will resume from."""

    uri: str
    step: int
    written_at: datetime
    rejected: tuple[str, ...] = ()  # newer checkpoints refused, with the reason
    mode: str = ""


@dataclass(frozen=True)
class Provisioned:
    cluster: str
    option: PlanOption
    attempts: tuple[str, ...] = ()  # one line per launch try, for the ledger


@dataclass(frozen=True)
class Resumed:
    checkpoint_loaded_at: datetime
    first_step_at: datetime
    first_step: int


@dataclass(frozen=True)
class Parity:
    passed: bool
    compared: int
    detail: str


class FailoverSteps(Protocol):
    """The world as the failover flow needs it. Each call is one step of the graph."""

    def confirm(self) -> Confirmation:
        """Re-check the outage against the detection quorum; raise StopFailover if not confirmed."""
        ...

    def fence(self) -> Fenced:
        """Bump the lease epoch (idempotent per run) and stop the primary job where reachable."""
        ...

    def certify(self, older_than: int | None = None) -> Certified:
        """The newest certified replica checkpoint (older than `older_than` on rollback).

        Raises StopFailover when none is certified."""
        ...

    def plan(self) -> tuple[PlanOption, ...]:
        """Ranked options on the secondary, the failed primary infra blocked."""
        ...

    def prestage(self) -> PrestageReadiness: ...

    def provision(self, options: Sequence[PlanOption]) -> Provisioned:
        """Get GPUs, falling back through `options` in order; idempotent by cluster name.
        Starts no job: that waits for the approval."""
        ...

    def resume(self, cluster: Provisioned, checkpoint: Certified) -> Resumed:
        """(Re)start the job from `checkpoint` on the cluster and wait for its first healthy step."""
        ...

    def prove(self, cluster: Provisioned, checkpoint: Certified) -> Parity:
        """Compare the first resumed steps' losses with the pre-failure log."""
        ...

    def teardown(self, cluster: Provisioned) -> None: ...


def expected_rto(outage_started_at: datetime, now: datetime, expected_ready: timedelta) -> timedelta:
    """Elapsed so far plus the runbook's typical approval-to-first-step time."""
    return timedelta(seconds=round((now - outage_started_at).total_seconds())) + expected_ready
