"""What the failover's steps hand on, what they need from the runbook, and their interface.

`FailoverSteps` is the world as the walker (`lifeboat_dr.core.failover.walk`) needs it: one call per
step of the graph (`lifeboat_dr.core.failover.graph`). `ProviderSteps` implements it over real
providers, `ScriptedSteps` (`lifeboat_dr.testing.failover_steps`) with scripted times and results.
`FailoverSettings` is the runbook's policy as plain values (built in `lifeboat_dr.flows.wiring`), so
the walker, the card and the rollback policy never need a `Runbook`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from lifeboat_dr.core.certify import CertifyReport
from lifeboat_dr.core.failover.proof import ProofPlan
from lifeboat_dr.core.prestage import PrestageReadiness
from lifeboat_dr.core.resume import ParityResult
from lifeboat_dr.providers.chat.base import ApprovalCard, ApprovalDecision
from lifeboat_dr.providers.compute.base import PlanOption


@dataclass(frozen=True)
class FailoverSettings:
    """The runbook's failover policy, as the walker, the card and the rollback read it."""

    runbook: str
    rto_target: timedelta
    rpo_target: timedelta
    retries: int = 0  # retries of a step that failed on ProviderUnavailable
    retry_delay_s: float = 0.0
    step_timeout_s: float = 3600.0  # how long the walker waits for one step
    expected_ready: timedelta = timedelta(0)  # typical approval-to-first-step time
    provision_before_approval: bool = False
    on_parity_failure: str = "rollback"  # rollback | page
    channel: str | None = None  # where the approval card goes
    approvers: tuple[str, ...] = ()
    logins: tuple[str, ...] = ()  # the verified logins that may decide (approval.logins), for the card
    on_timeout: str = "abort"  # what the deadline does when nobody decides
    nodes: int | None = None  # nodes behind the plan's $/h (None: unknown)


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
    # A failback: the newest checkpoint certified once the standby's job stopped (its last
    # commit, newer than the one approved); the resume starts there. None: the approved one.
    checkpoint: CertifyReport | None = None
    note: str = ""  # what else the fence did, one line for the ledger (a failback's handover)


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
    kept: bool = False  # a re-run found the job already running from the checkpoint: not restarted
    job: str = ""  # the backend's words for the job (pid, job id), for the ledger


class FailoverSteps(Protocol):
    """The world as the failover needs it. Each call is one step of the graph."""

    def confirm(self) -> Confirmation:
        """Re-check the outage against the detection quorum; raise StopFailover if not confirmed."""
        ...

    def fence(self, checkpoint: CertifyReport | None = None) -> Fenced:
        """Bump the lease epoch (idempotent per run) and stop the primary job where reachable;
        the old epoch sealed at `checkpoint`'s commit, the one the run resumes from."""
        ...

    def certify(self, older_than: int | None = None) -> CertifyReport:
        """Certification of the replica; its `certified` (never None here, with an absolute
        URI) is the newest certified checkpoint (older than `older_than` on rollback).

        Raises StopFailover when none is certified."""
        ...

    def plan(self) -> tuple[PlanOption, ...]:
        """Ranked feasible options on the secondary, the failed primary infra blocked."""
        ...

    def prestage(self) -> PrestageReadiness: ...

    def provision(self, options: Sequence[PlanOption]) -> Provisioned:
        """Get GPUs, falling back through `options` in order; idempotent by cluster name.
        Starts no job: that waits for the approval."""
        ...

    def resume(self, cluster: Provisioned, checkpoint: CertifyReport) -> Resumed:
        """(Re)start the job from the report's certified checkpoint and wait for its first
        healthy step. A job the cluster already runs from that checkpoint (a re-run whose
        first attempt started it) is kept, not restarted."""
        ...

    def plan_proof(self, checkpoint: CertifyReport) -> ProofPlan:
        """Before the approval: which proof a resume from `checkpoint` will get (its own
        steps, a replay of the previous certified checkpoint beside it, or none)."""
        ...

    def prove(self, cluster: Provisioned, checkpoint: CertifyReport) -> ParityResult:
        """Compare the first resumed steps' losses with the pre-failure log; when they prove
        nothing, replay the previous certified checkpoint beside the job
        (`lifeboat_dr.core.failover.proof`)."""
        ...

    def teardown(self, cluster: Provisioned) -> None: ...

    def still_there(self, checkpoint: CertifyReport) -> bool:
        """Whether `checkpoint` (chosen by an earlier attempt of this run) still certifies:
        retention may have taken it once that attempt's entry stopped saying it is in use."""
        ...

    def fence_read_back(self) -> str | None:
        """Where a lease this run took is, read back from the stores ("epoch 1 on s3://…";
        None: no store answering holds one): after a fence step that failed, whether its
        lease landed anyway, so that the ledger records the fence."""
        ...

    def recheck(self, step: str) -> None:
        """Before a step that acts (fence, provision, resume): raise `StandDown` when another
        failover of this runbook has taken the job over since this run confirmed."""
        ...


class Gate(Protocol):
    """Asks the humans (or the policy) and tells them how it went."""

    def request(self, card: ApprovalCard, ledger) -> ApprovalDecision:
        """Post the card and wait; records approval_requested/granted (or the rejection)."""
        ...

    def announce(self) -> None:
        """Tell the people how it went (the card's update, the decision's trail), in the
        background: called once the step after the decision has begun, or at once on a
        rejection, so that the announcement never delays the next step."""
        ...

    def notify(self, text: str) -> None: ...


def expected_rto(outage_started_at: datetime, now: datetime, expected_ready: timedelta) -> timedelta:
    """Elapsed so far plus the runbook's typical approval-to-first-step time."""
    return timedelta(seconds=round((now - outage_started_at).total_seconds())) + expected_ready
