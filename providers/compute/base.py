"""The compute interface: plan, launch, watch and tear down the secondary's cluster.

Backends (`LocalCompute`, `FakeCompute`, `SkyPilotCompute`) implement the `Compute` primitives
and nothing else; ordered fallback, waiting and guaranteed teardown are written once on top
of them (`lifeboat_dr.providers.compute.fallback`). Everything crossing the boundary is a dataclass of
this module: no backend hands out SDK objects.

A *cluster* is named by the caller (`<runbook>-failover`, `<runbook>-drill-<id>`), which
makes `launch` idempotent: launching a name that is already up returns it and starts
nothing new, so a flow re-run after a crash never pays for two clusters.

Provisioning and starting the job are apart: `launch(cluster, option)` without a job only
acquires the cluster (its job state is `IDLE`), so GPUs can be held while a human approves
without the job writing a single checkpoint; `run(cluster, job)` then starts the job, and
restarts it (from an older checkpoint, after a failed loss-parity gate) on the same cluster.
`launch(cluster, option, job)` does both, as a single call.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lifeboat_dr.kernel.errors import LifeboatError, ProviderUnavailable

if TYPE_CHECKING:
    from lifeboat_dr.runbooks.model import Candidate


class CapacityError(ProviderUnavailable):
    """The place asked for has no capacity (or quota) right now: try the next candidate."""


class JobTimeout(LifeboatError):
    """The job did not reach the awaited state in time."""


@dataclass(frozen=True)
class PlanOption:
    """One place the job could run, as the optimizer priced it."""

    infra: str  # SkyPilot infra string: aws/us-west-2, gcp/us-central1, local
    instance_type: str | None  # chosen (or pinned) instance type; None when not applicable
    accelerators: str | None  # e.g. "H100:8"
    use_spot: bool
    hourly_usd: float | None  # price per hour of the whole cluster; None when unknown (local, k8s)
    rank: int = 0  # position in the runbook's ordered candidate list (fallback order)
    feasible: bool = True  # False: blocked or absent from the catalog; `reason` says why
    reason: str = ""
    price_source: str = (
        ""  # where the price came from: "snapshot catalog of 2026-11-30 ...", "live catalog ..."
    )

    def describe(self) -> str:
        kind = "spot" if self.use_spot else "on-demand"
        price = f"${self.hourly_usd:,.2f}/h" if self.hourly_usd is not None else "price n/a"
        what = " ".join(x for x in (self.instance_type, self.accelerators) if x)
        source = f" ({self.price_source})" if self.price_source and self.hourly_usd is not None else ""
        return f"{self.infra} {what} {kind} {price}{source}".replace("  ", " ")


@dataclass(frozen=True)
class JobSpec:
    """What to start on the cluster, resolved from the runbook once (`lifeboat_dr.flows.wiring.job_spec`)."""

    name: str  # the runbook's name
    command: str | None = None  # local shell command (LocalCompute, FakeCompute)
    task_yaml: Path | None = None  # the user's SkyPilot task YAML (SkyPilotCompute)
    workdir: Path | None = None
    resume_env: str | None = None  # env var set to the checkpoint URI ...
    resume_arg: str | None = None  # ... or argument template containing {checkpoint}
    checkpoint: str | None = None  # certified checkpoint URI to resume from; None: fresh start
    env: Mapping[str, str] = field(default_factory=dict)
    store_uri: str | None = None  # secondary checkpoint store, mounted where the backend can
    primary_store_uri: str | None = None  # the failed site's store: task references to it move to store_uri

    def resuming_from(self, checkpoint: str | None) -> JobSpec:
        return replace(self, checkpoint=checkpoint)

    def resume_envs(self) -> dict[str, str]:
        """Environment for the job: its own plus the resume variable, if that is how it resumes."""
        env = dict(self.env)
        if self.checkpoint and self.resume_env:
            env[self.resume_env] = self.checkpoint
        return env

    def resume_suffix(self) -> str:
        """Argument text appended to the command, if the job resumes by argument."""
        if self.checkpoint and self.resume_arg:
            return " " + self.resume_arg.replace("{checkpoint}", shlex.quote(self.checkpoint))
        return ""


class ClusterState(StrEnum):
    PROVISIONING = "provisioning"  # asked for, not up yet (slow boot)
    UP = "up"
    PREEMPTED = "preempted"  # spot capacity reclaimed; the cluster is gone or going
    TERMINATED = "terminated"


class JobState(StrEnum):
    IDLE = "idle"  # the cluster holds no job: provisioned by `launch` without one
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


@dataclass(frozen=True)
class ClusterStatus:
    """What a backend knows about one cluster and the job on it."""

    name: str
    state: ClusterState
    option: PlanOption
    job: JobState
    launched_at: datetime
    returncode: int | None = None  # the job's exit status, once finished
    detail: str = ""  # backend words: pid, sky job id, managed job id


@dataclass(frozen=True)
class LaunchAttempt:
    """One try at one candidate, kept for the ledger and the incident channel."""

    option: PlanOption
    ok: bool
    seconds: float
    error: str = ""  # class name and message when not ok


@dataclass(frozen=True)
class LaunchResult:
    cluster: ClusterStatus
    attempts: tuple[LaunchAttempt, ...]


@runtime_checkable
class Compute(Protocol):
    """Somewhere to run the job: a SkyPilot cloud, a local process group, or a fake."""

    def plan(self, candidates: Sequence[PlanOption], blocked: Sequence[str] = ()) -> list[PlanOption]:
        """Price each candidate (runbook order kept in `rank`) with `blocked` infras excluded.

        Returns every candidate: the feasible ones sorted by rank, then the infeasible ones
        with `feasible=False` and a `reason`, so the on-call sees why a choice is missing."""
        ...

    def launch(self, cluster: str, option: PlanOption, job: JobSpec | None = None) -> ClusterStatus:
        """Provision `cluster` on `option` and, given a `job`, start it there; idempotent by name.

        Without a job the cluster is only acquired and its job state is `IDLE`. A name that
        is already provisioning or up is returned as is, its job untouched (even a finished
        one: restarting is `run`); the one exception is an `IDLE` cluster given a job, which
        starts it, so `launch(c, o)` then `launch(c, o, job)` equals `launch(c, o, job)`.
        Raises `CapacityError` when the option has no capacity (nothing is left behind),
        `ProviderUnavailable` for other retryable failures."""
        ...

    def run(self, cluster: str, job: JobSpec) -> ClusterStatus:
        """Start `job` on the up `cluster`; a job still running there is stopped first (its
        whole process tree, as teardown would) and the new one replaces it: a restart from
        another checkpoint keeps the GPUs. `logs` then shows the new job's output only.

        Raises `NotFound` for an unknown cluster, `PreconditionFailed` when it is not up
        (still provisioning, preempted)."""
        ...

    def status(self, cluster: str) -> ClusterStatus:
        """Current state of the cluster and its job. Raises `NotFound`."""
        ...

    def logs(self, cluster: str) -> str:
        """Everything the job started last has written to stdout/stderr so far ("" while
        the cluster is idle). Raises `NotFound`."""
        ...

    def teardown(self, cluster: str) -> None:
        """Stop the job and release the cluster; tearing down a missing one is not an error."""
        ...

    def clusters(self) -> list[str]:
        """Names of the clusters this backend holds (provisioning or up), sorted."""
        ...


def plan_options(candidates: Sequence[Candidate]) -> list[PlanOption]:
    """A runbook's ordered secondary candidates (`secondary.candidates`), unpriced."""
    return [
        PlanOption(
            infra=c.infra,
            instance_type=c.instance_type,
            accelerators=c.accelerators,
            use_spot=c.use_spot,
            hourly_usd=None,
            rank=i,
        )
        for i, c in enumerate(candidates)
    ]


def is_blocked(infra: str, blocked: Sequence[str]) -> bool:
    """`aws/us-east-1` is blocked by `aws/us-east-1` and by `aws` (the whole cloud)."""
    parts = infra.strip("/").split("/")
    for b in blocked:
        bparts = b.strip("/").split("/")
        if parts[: len(bparts)] == bparts:
            return True
    return False


def wait_for(
    compute: Compute,
    cluster: str,
    done: Callable[[ClusterStatus], bool],
    *,
    timeout: float,
    poll: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterStatus:
    """Poll `status` until `done(status)`; raises `JobTimeout` with the last state seen."""
    deadline = clock() + timeout
    while True:
        st = compute.status(cluster)
        if done(st):
            return st
        if clock() >= deadline:
            raise JobTimeout(f"{cluster}: still {st.state}/{st.job} after {timeout:g}s")
        sleep(poll)
