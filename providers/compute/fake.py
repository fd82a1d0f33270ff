"""A stateful in-memory compute backend with scripted trouble. See base.py.

It behaves like a cloud seen through SkyPilot: launches cost (virtual) time, some infras
have no capacity for the next N tries, a cluster may boot slowly, spot capacity may be
reclaimed. Time is an injected clock, so tests script hours of trouble in microseconds.
It passes the same contract suite as `LocalCompute`. `run` replaces the job on the cluster
(the old one stops at once); a preempted cluster is gone until launched again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from lifeboat_dr.kernel.errors import NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.providers.compute.base import (
    CapacityError,
    ClusterState,
    ClusterStatus,
    JobSpec,
    JobState,
    PlanOption,
    is_blocked,
)


class FakeClock:
    """Seconds since an arbitrary start; advanced by the test or by scripted delays."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Cluster:
    option: PlanOption
    launched: float
    up_at: float
    job: JobSpec | None = None  # None: idle, launched without a job
    finishes_at: float | None = None  # None: runs forever (or no job)
    exit_code: int = 0
    preempted: bool = False
    log: list[str] = field(default_factory=list)


class FakeCompute:
    """`prices`: $/h per infra prefix ('aws/us-west-2' or 'aws'); `no_capacity`: infra ->
    how many more launches fail there (-1: always); `boot_seconds`: infra -> virtual boot
    time; `job_seconds`: how long a job runs once up (None: forever); `launch_seconds`: the
    virtual time a failed or successful launch call costs the caller."""

    def __init__(
        self,
        *,
        clock: FakeClock | None = None,
        prices: dict[str, float] | None = None,
        no_capacity: dict[str, int] | None = None,
        boot_seconds: dict[str, float] | None = None,
        job_seconds: float | None = 0.0,
        exit_code: int = 0,
        launch_seconds: float = 0.0,
        unavailable: Callable[[str], bool] | None = None,
    ):
        self.clock = clock or FakeClock()
        self.prices = prices or {}
        self.no_capacity = dict(no_capacity or {})
        self.boot_seconds = boot_seconds or {}
        self.job_seconds = job_seconds
        self.exit_code = exit_code
        self.launch_seconds = launch_seconds
        self.unavailable = unavailable  # infra -> True: the API itself is down (retryable)
        self.launch_calls: list[tuple[str, str]] = []  # (cluster, infra), in order
        self.run_calls: list[str] = []  # clusters `run` (re)started a job on, in order
        self._clusters: dict[str, _Cluster] = {}
        self._epoch = datetime(2026, 1, 1, tzinfo=UTC)
        self._ids = itertools.count(1)

    def _price(self, option: PlanOption) -> float | None:
        for key in sorted(self.prices, key=len, reverse=True):
            if is_blocked(option.infra, [key]):
                price = self.prices[key]
                return round(price * 0.4, 2) if option.use_spot else price
        return None

    def plan(self, candidates: Sequence[PlanOption], blocked: Sequence[str] = ()) -> list[PlanOption]:
        out = []
        for c in candidates:
            price = self._price(c)
            if is_blocked(c.infra, blocked):
                out.append(replace(c, feasible=False, reason=f"{c.infra} is blocked"))
            elif price is None and c.infra != "local":
                out.append(replace(c, feasible=False, reason=f"{c.infra} is not in the catalog"))
            else:
                out.append(replace(c, feasible=True, reason="", hourly_usd=price))
        return sorted(out, key=lambda o: (not o.feasible, o.rank))

    def launch(self, cluster: str, option: PlanOption, job: JobSpec | None = None) -> ClusterStatus:
        self.launch_calls.append((cluster, option.infra))
        existing = self._clusters.get(cluster)
        if existing is not None and not existing.preempted:
            if job is not None and existing.job is None:
                self._start(cluster, existing, job)  # provisioned earlier: start the job now
            return self.status(cluster)
        self.clock.sleep(self.launch_seconds)
        if self.unavailable and self.unavailable(option.infra):
            raise ProviderUnavailable(f"{option.infra}: API unavailable (scripted)")
        left = self._scripted_capacity(option.infra)
        if left:
            raise CapacityError(
                f"{option.infra}: no capacity for {option.accelerators or 'the job'} (scripted)"
            )
        now = self.clock()
        c = _Cluster(option=option, launched=now, up_at=now + self._boot(option.infra))
        self._clusters[cluster] = c
        if job is not None:
            self._start(cluster, c, job)
        return self.status(cluster)

    def run(self, cluster: str, job: JobSpec) -> ClusterStatus:
        c = self._get(cluster)
        st = self.status(cluster)
        if st.state is not ClusterState.UP:
            raise PreconditionFailed(f"fake cluster {cluster!r} is {st.state}, not up: cannot run a job")
        self.run_calls.append(cluster)
        self._start(cluster, c, job)  # a running job is simply replaced: it stops here
        return self.status(cluster)

    def _start(self, cluster: str, c: _Cluster, job: JobSpec) -> None:
        """The job starts once the cluster is up (now, or at the end of a slow boot)."""
        begins = max(self.clock(), c.up_at)
        c.job = job
        c.finishes_at = None if self.job_seconds is None else begins + self.job_seconds
        c.exit_code = self.exit_code
        argv = (job.command or str(job.task_yaml)) + job.resume_suffix()
        envs = " ".join(f"{k}={v}" for k, v in sorted(job.resume_envs().items()))
        c.log = [f"fake job {next(self._ids)} on {c.option.infra}: {argv} {envs}".rstrip()]

    def _scripted_capacity(self, infra: str) -> bool:
        for key in sorted(self.no_capacity, key=len, reverse=True):
            if is_blocked(infra, [key]):
                n = self.no_capacity[key]
                if n == 0:
                    return False
                if n > 0:
                    self.no_capacity[key] = n - 1
                return True
        return False

    def _boot(self, infra: str) -> float:
        for key in sorted(self.boot_seconds, key=len, reverse=True):
            if is_blocked(infra, [key]):
                return self.boot_seconds[key]
        return 0.0

    def end_job(self, cluster: str, exit_code: int) -> None:
        """The job on `cluster` exits now with `exit_code` (a training guard's 83, a crash)."""
        c = self._get(cluster)
        c.finishes_at, c.exit_code = self.clock(), exit_code
        c.log.append(f"fake: the job exited {exit_code}")

    def preempt(self, cluster: str) -> None:
        """Reclaim a (spot) cluster: its job fails, the cluster is gone as in the cloud."""
        c = self._get(cluster)
        c.preempted = True
        c.log.append("fake: instance preempted")

    def status(self, cluster: str) -> ClusterStatus:
        c = self._get(cluster)
        now = self.clock()
        rc = None
        if c.preempted:
            state, job = ClusterState.PREEMPTED, JobState.FAILED if c.job else JobState.IDLE
        elif now < c.up_at:
            state, job = ClusterState.PROVISIONING, JobState.PENDING if c.job else JobState.IDLE
        elif c.job is None:
            state, job = ClusterState.UP, JobState.IDLE
        elif c.finishes_at is None or now < c.finishes_at:
            state, job = ClusterState.UP, JobState.RUNNING
        else:
            state, rc = ClusterState.UP, c.exit_code
            job = JobState.SUCCEEDED if rc == 0 else JobState.FAILED
        return ClusterStatus(
            name=cluster,
            state=state,
            option=c.option,
            job=job,
            launched_at=self._epoch + timedelta(seconds=c.launched),
            returncode=rc,
            detail="fake",
        )

    def logs(self, cluster: str) -> str:
        log = self._get(cluster).log
        return "\n".join(log) + "\n" if log else ""

    def teardown(self, cluster: str) -> None:
        self._clusters.pop(cluster, None)

    def clusters(self) -> list[str]:
        return sorted(self._clusters)

    def _get(self, cluster: str) -> _Cluster:
        try:
            return self._clusters[cluster]
        except KeyError:
            raise NotFound(f"fake cluster {cluster!r} does not exist") from None
