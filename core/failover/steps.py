"""`ProviderSteps`: the failover's steps over real interfaces (stores, compute, probes).

It takes what it needs as plain values (`StepSpec`) and interfaces (`Providers`), never a
`Runbook`: `flows/wiring.py` builds both. A dry run builds the very same steps over a
sandboxed runbook (local stores, local compute, the tiny trainer), so CI rehearses this
code path, not a mock of it.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property

from lifeboat_dr.core.certify import CertifyReport, certify_replica
from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy, decide
from lifeboat_dr.core.failover.contract import Confirmation, Fenced, Provisioned, Resumed
from lifeboat_dr.core.failover.proof import ProofPlan, plan_proof, proof_cluster, replay
from lifeboat_dr.core.prestage import PrestageReadiness
from lifeboat_dr.core.resume import (
    ParityOutcome,
    ParityResult,
    loss_parity,
    parse_loaded,
    parse_losses,
    wait_first_step,
)
from lifeboat_dr.kernel.errors import LifeboatError, StandDown, StopFailover
from lifeboat_dr.providers.compute.base import Compute, JobSpec, JobState, PlanOption
from lifeboat_dr.providers.image_registry import Registry
from lifeboat_dr.providers.storage.base import Store


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Providers:
    """Everything outside Lifeboat that a failover touches."""

    primary: Store | None  # None: not even openable (the outage); the secondary must do
    secondary: Store
    compute: Compute
    registry: Registry
    open_store: Callable[[str], Store]  # any store URI -> its Store, with its site's endpoint
    witness: Store | None = None  # the runbook's third site-state store, if it names one
    primary_probe: Store | None = None  # the primary's store with the probe deadline: certify asks it first


@dataclass(frozen=True)
class StepSpec:
    """What the steps need from the runbook, as plain values and small callables."""

    layout: str  # checkpoint layout to certify
    blocked: tuple[str, ...]  # infra the plan must avoid (the failed primary)
    candidates: tuple[PlanOption, ...]  # the runbook's ordered secondary candidates, unpriced
    provision_budget_s: float
    first_step_timeout_s: float
    parity_steps: int
    parity_tolerance: float
    job: Callable[[str], JobSpec]  # the job to start from a checkpoint URI
    quorum: QuorumPolicy
    probes: Callable[[], Sequence]  # the detection probes, built when the quorum is re-checked
    prestage: Callable[[], PrestageReadiness]  # stage weights, then check readiness
    loss_log: Callable[[], str] | None = None  # the pre-failure loss log's text
    primary_cluster: str | None = None  # the primary job's cluster, stopped when fencing
    activates: str = "secondary"  # the site the fence makes active (a failback: "primary")
    runbook: str = ""  # the runbook's name: the site state it reads and fences must be its own
    parity_min_coverage: float = 0.5  # least share of parity_steps compared for a pass
    replay_scratch: str | None = (
        None  # where a proof's replay writes on the cluster (None: a temp folder here)
    )


def confirm_outage(
    probes: Callable[[], Sequence],
    quorum: QuorumPolicy,
    *,
    evidence: Sequence[str] = (),
    force: bool = False,
    outage_started_at: datetime | None = None,
    detected_at: datetime | None = None,
    clock: Callable[[], datetime] = _now,
) -> Confirmation:
    """The outage, confirmed: by `evidence` the watch flow's quorum handed over, else by the
    quorum over the probes read now; `StopFailover` when it does not confirm, unless `force`
    (a person says so). The training failover's confirm step and the serving walk's."""
    now = clock()
    if evidence:  # the watch flow's quorum already confirmed it
        return Confirmation(outage_started_at or now, detected_at or now, tuple(evidence))
    readings = [probe.check(None) for probe in probes()]
    now = clock()  # after the probes: a reading taken after `now` would not be live
    decision = decide(readings, now, quorum)
    lines = tuple(f"{r.signal}: {r.summary}" for r in readings if r.failing)
    if decision.state is not OutageState.confirmed and not force:
        raise StopFailover(f"outage not confirmed: {decision.summary} (start with force to override)")
    if not lines:
        lines = ("started by hand with force: no signal is failing",)
    start = outage_started_at or decision.outage_started_at or now
    return Confirmation(start, detected_at or now, lines)


class ProviderSteps:
    """The failover's steps for one runbook, over its providers. See core/failover/contract.py."""

    def __init__(
        self,
        spec: StepSpec,
        providers: Providers,
        *,
        run_id: str,
        cluster: str,
        outage_started_at: datetime | None = None,
        detected_at: datetime | None = None,
        evidence: Sequence[str] | None = None,
        force: bool = False,
        clock: Callable[[], datetime] = _now,
        poll_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.spec, self.p = spec, providers
        self.run_id, self.cluster = run_id, cluster
        self.outage_started_at, self.detected_at = outage_started_at, detected_at
        self.evidence, self.force, self.clock, self.poll_s = tuple(evidence or ()), force, clock, poll_s
        # every wait reads these, and the fence's seal `clock`: a simulation injects them all
        self.sleep, self.monotonic = sleep, monotonic
        self.expected_epoch: int | None = None  # read by confirm()
        self.epoch: int | None = None  # the epoch the fence took; the resumed job writes under it

    def sites(self) -> dict[str, Store | None]:
        """The stores that hold the site state, by their real roles."""
        from lifeboat_dr.core.sitestate import site_stores

        return site_stores(self.p.primary, self.p.secondary, self.p.witness)

    def site_state(self):
        """The site state, newest of the stores (`lifeboat_dr.core.sitestate`); a view that is
        not conclusive is `SiteStateUnknown` (retryable), another runbook's is `StopFailover`."""
        from lifeboat_dr.core.sitestate import read_site_state

        return read_site_state(self.sites(), runbook=self.spec.runbook)

    def superseded(self, state) -> None:
        """`StandDown` when this run's fence was already ended by a later one (a failback, say):
        a re-run of it, however late, must not fence again and take the job back."""
        ended = state.lease.ended_for(self.run_id) if state.lease is not None else None
        if ended is not None:
            raise StandDown(
                f"this run's fence (epoch {ended.epoch}, {ended.active} active) was ended by a later "
                f"one: {state.describe()}; nothing to do"
            )

    def confirm(self) -> Confirmation:
        # The epoch seen at confirmation: if another failover fences first, ours stops
        # instead of fencing *it* out.
        state = self.site_state()
        self.clocks  # noqa: B018 - read now: the skew as it was when the outage was stamped
        self.superseded(state)
        self.expected_epoch = state.epoch
        lease = state.lease
        already = (
            lease is not None and lease.run_id != self.run_id and lease.holder == f"lifeboat:{self.cluster}"
        )
        if already and lease.active == self.spec.activates:
            raise StandDown(
                f"already moved to {self.cluster} by run {lease.run_id} (epoch {lease.epoch}, "
                f"{lease.acquired_at:%Y-%m-%d %H:%M:%S}Z): nothing to do until the roles change again"
            )
        return confirm_outage(
            self.spec.probes,
            self.spec.quorum,
            evidence=self.evidence,
            force=self.force,
            outage_started_at=self.outage_started_at,
            detected_at=self.detected_at,
            clock=self.clock,
        )

    def recheck(self, step: str) -> None:
        lease = self.site_state().lease
        if lease is None or lease.run_id == self.run_id:
            return
        if self.expected_epoch is not None and lease.epoch != self.expected_epoch:
            raise StandDown(
                f"before {step}: failover run {lease.run_id} took the job (epoch {lease.epoch}, "
                f"{lease.holder}) after this run confirmed at epoch {self.expected_epoch}"
            )

    def fence(self, checkpoint: CertifyReport | None = None) -> Fenced:
        """`checkpoint`: the one the run resumes from; the old epoch is sealed at its commit."""
        from lifeboat_dr.core.fencing import fence_job

        try:
            lease, on_primary = fence_job(
                self.p.secondary,
                self.p.primary,
                run_id=self.run_id,
                holder=f"lifeboat:{self.cluster}",
                expect_epoch=self.expected_epoch,
                active=self.spec.activates,
                runbook=self.spec.runbook,
                witness=self.p.witness,
                clock=self.clock,
                resumes=self._commit_of(checkpoint) if checkpoint is not None else None,
            )
        except StopFailover as e:  # another run moved the lease first: it has the job
            raise StandDown(str(e)) from None
        self.epoch = lease.epoch
        stores = (self.p.secondary.uri,) + ((self.p.primary.uri,) if on_primary else ())
        stopped = False
        if self.spec.primary_cluster:
            try:
                self.p.compute.teardown(self.spec.primary_cluster)
                stopped = True
            except LifeboatError:
                stopped = False  # unreachable: the lease keeps it from committing
        return Fenced(lease.epoch, stores, stopped)

    def fence_read_back(self, tries: int = 3) -> str | None:
        from lifeboat_dr.core.fencing import peek_lease

        found = []
        for store in (s for s in self.sites().values() if s is not None):
            for _ in range(tries):  # the step just failed on these stores: a few tries each
                try:
                    lease = peek_lease(store)
                except LifeboatError:
                    continue
                if lease is not None and lease.run_id == self.run_id:
                    found.append(f"epoch {lease.epoch} on {store.uri}")
                break
        return ", ".join(found) or None

    @cached_property
    def clocks(self):
        """The secondary store's clock against ours, read once per run (None: unreadable):
        at confirmation, next to the outage's start it converts store times against (our
        clock may step later in the run, an NTP correction)."""
        from lifeboat_dr.core.clocks import store_time

        try:
            return store_time(self.p.secondary, self.clock)
        except LifeboatError:
            return None

    def certify(self, older_than: int | None = None) -> CertifyReport:
        # RPO by the stores' clocks: the reference time is taken onto the secondary store's
        # clock for certification, and the write time brought back onto ours for the ledger.
        reading = self.clocks
        skew = reading.skew if reading is not None else timedelta(0)
        report = certify_replica(
            self.p.secondary,
            self.p.primary,
            layout=self.spec.layout,
            at=(self.outage_started_at or self.clock()) + skew,
            older_than=older_than,
            sites=self.sites(),
            source_probe=self.p.primary_probe,  # one that does not answer costs one probe deadline
        )
        clocks = reading.describe() if reading is not None else f"{self.p.secondary.uri}: clock not readable"
        report = dataclasses.replace(report, at=report.at - skew, clocks=clocks)
        if report.certified is None:
            rejected = "; ".join(f"step {r.step}: {r.reason} — {r.detail}" for r in report.rejected)
            older = f" older than step {older_than}" if older_than is not None else ""
            why = f" ({rejected})" if rejected else ""
            raise StopFailover(f"no certified checkpoint{older} on {self.p.secondary.uri}{why}")
        c = report.certified
        uri = c.uri if "://" in c.uri else f"{self.p.secondary.uri.rstrip('/')}/{c.uri.strip('/')}"
        return dataclasses.replace(
            report, certified=dataclasses.replace(c, uri=uri, written_at=c.written_at - skew)
        )

    def plan(self) -> tuple[PlanOption, ...]:
        ranked = self.p.compute.plan(list(self.spec.candidates), blocked=list(self.spec.blocked))
        feasible = tuple(o for o in ranked if o.feasible)
        if not feasible:
            why = "; ".join(f"{o.infra}: {o.reason}" for o in ranked)
            raise StopFailover(f"no feasible place to fail over to ({why})")
        return feasible

    def prestage(self) -> PrestageReadiness:
        return self.spec.prestage()

    def provision(self, options: Sequence[PlanOption]) -> Provisioned:
        from lifeboat_dr.providers.compute.fallback import launch_with_fallback

        up = self._already_up(options)
        if up is not None:  # an earlier attempt's (a re-run): kept, never relaunched nor torn down
            return Provisioned(self.cluster, up.option, (f"{up.option.infra}: already up, kept",))
        result = launch_with_fallback(
            self.p.compute,
            self.cluster,
            options,
            None,
            budget_s=self.spec.provision_budget_s,
            clock=self.monotonic,
            sleep=self.sleep,
        )
        attempts = tuple(
            f"{a.option.infra}: {'ok' if a.ok else a.error} ({a.seconds:.1f}s)" for a in result.attempts
        )
        return Provisioned(self.cluster, result.cluster.option, attempts)

    def _commit_of(self, checkpoint: CertifyReport) -> tuple[int, int, str] | None:
        """(epoch, seq, counter) of the checkpoint's guarded commit (None: it has no marker
        with a sequence, a layout without guarded commits)."""
        import json

        from lifeboat_dr.core.sitestate import read_marker

        root = self.p.secondary.uri.rstrip("/") + "/"
        uri = checkpoint.certified.uri
        if not uri.startswith(root):
            return None
        marker = read_marker(self.p.secondary, uri[len(root) :].strip("/"))
        try:
            doc = json.loads(marker) if marker is not None else {}
            return int(doc["epoch"]), int(doc["seq"]), str(doc.get("counter", ""))
        except (ValueError, KeyError, TypeError):
            return None

    def still_there(self, checkpoint: CertifyReport) -> bool:
        step = checkpoint.certified.step
        try:  # certified again, no newer than it (a newer one is the resumed job's own)
            return self.certify(older_than=step + 1).certified.step == step
        except StopFailover:
            return False

    def seal_at(self, checkpoint: CertifyReport) -> None:
        """Before the job resumes from `checkpoint`: the epoch it belongs to is sealed at its
        commit (a rollback's older checkpoint, a re-run's), in the stores holding this run's lease."""
        from lifeboat_dr.core.fencing import seal_at_resume

        commit = self._commit_of(checkpoint)
        if commit is not None:
            seal_at_resume(self.sites().values(), self.run_id, commit, required=self.p.secondary)

    def _already_up(self, options: Sequence[PlanOption]):
        """The cluster, when it is up already on one of `options`' infra (None: it is not, or
        does not exist). A failed launch is torn down by the fallback: a re-run must not
        relaunch the cluster its first attempt's job runs on, where one 503 would tear it down."""
        from lifeboat_dr.kernel.errors import NotFound
        from lifeboat_dr.providers.compute.base import ClusterState

        try:
            status = self.p.compute.status(self.cluster)
        except NotFound:
            return None
        infra = {o.infra for o in options}
        return status if status.state is ClusterState.UP and status.option.infra in infra else None

    def resume(self, cluster: Provisioned, checkpoint: CertifyReport) -> Resumed:
        started = self.clock()
        ckpt, compute = checkpoint.certified, self.p.compute
        self.seal_at(checkpoint)
        kept = self._runs_from(cluster.cluster, ckpt.step)
        if not kept:
            compute.run(cluster.cluster, self.job(ckpt.uri))
        first = wait_first_step(
            lambda: compute.logs(cluster.cluster),
            ckpt.step,
            timeout_s=self.spec.first_step_timeout_s,
            job_alive=lambda: not compute.status(cluster.cluster).job.finished,
            clock=self.monotonic,
            sleep=self.sleep,
            poll_s=self.poll_s,
            now=self.clock,
        )
        loaded = parse_loaded(compute.logs(cluster.cluster))
        loaded_at = loaded[1] if loaded and loaded[0] == ckpt.step else started
        if not kept:  # a log line of an earlier job cannot be this one's load
            loaded_at = max(loaded_at, started)
        job = compute.status(cluster.cluster).detail
        return Resumed(loaded_at, first.at, first.step, kept=kept, job=job)

    def _runs_from(self, cluster: str, step: int) -> bool:
        """Whether the cluster's job resumed from `step` and has not failed: a re-run whose
        first attempt started it before its record landed. Told by the job's own log line
        (`{"event": "loaded", "step": N}`, `parse_loaded`); a job that logs none is restarted."""
        if self.p.compute.status(cluster).job in (JobState.IDLE, JobState.FAILED):
            return False
        loaded = parse_loaded(self.p.compute.logs(cluster))
        return loaded is not None and loaded[0] == step

    def job(self, checkpoint_uri: str) -> JobSpec:
        """The job to start, told the epoch it commits under (`LIFEBOAT_EPOCH`) and its store
        (`LIFEBOAT_STORE`): `lifeboat_dr.core.commit.commit_or_exit` reads both."""
        job = self.spec.job(checkpoint_uri)
        epoch = self.epoch if self.epoch is not None else self.site_state().epoch
        env = {**job.env, "LIFEBOAT_EPOCH": str(epoch)}
        if job.store_uri:
            env["LIFEBOAT_STORE"] = job.store_uri
        return dataclasses.replace(job, env=env)

    def pre_failure(self) -> dict[int, float]:
        return parse_losses(self.spec.loss_log() if self.spec.loss_log is not None else "")

    def older_than(self, step: int) -> CertifyReport | None:
        """The certified checkpoint before `step` (None: there is none)."""
        try:
            return self.certify(older_than=step)
        except StopFailover:
            return None

    def plan_proof(self, checkpoint: CertifyReport) -> ProofPlan:
        """Which proof a resume from `checkpoint` will get (`lifeboat_dr.core.failover.proof`)."""
        s, step = self.spec, checkpoint.certified.step
        pre = self.pre_failure()
        plan = plan_proof(pre, step, None, s.parity_steps, s.parity_min_coverage)
        if plan.how != "none" or not s.parity_steps:
            return plan  # its own steps will do: no older checkpoint to certify
        older = self.older_than(step)
        return plan_proof(
            pre, step, older.certified.step if older else None, s.parity_steps, s.parity_min_coverage
        )

    def prove(self, cluster: Provisioned, checkpoint: CertifyReport) -> ParityResult:
        """The resumed job's own first steps against the pre-failure log; when they prove
        nothing, a replay of the previous certified checkpoint beside it (see proof.py)."""
        s, step = self.spec, checkpoint.certified.step
        pre = self.pre_failure()
        if not s.parity_steps:
            return loss_parity(pre, {}, step, 0, s.parity_tolerance)
        wanted = [n for n in range(step + 1, step + s.parity_steps + 1) if n in pre]
        deadline = self.monotonic() + s.first_step_timeout_s
        while True:  # wait until the resumed job has logged the steps to compare (or stopped)
            resumed = parse_losses(self.p.compute.logs(cluster.cluster))
            finished = self.p.compute.status(cluster.cluster).job.finished
            if all(n in resumed for n in wanted) or finished or self.monotonic() > deadline:
                break
            self.sleep(self.poll_s)
        own = loss_parity(
            pre, resumed, step, s.parity_steps, s.parity_tolerance, min_coverage=s.parity_min_coverage
        )
        if own.outcome is not ParityOutcome.not_provable:
            return own
        older = self.older_than(step)
        if older is None:
            return dataclasses.replace(own, detail=f"{own.detail}; no older certified checkpoint to replay")
        if not plan_proof(pre, step, older.certified.step, s.parity_steps, s.parity_min_coverage).replay_step:
            return dataclasses.replace(
                own, detail=f"{own.detail}; nor after step {older.certified.step}: nothing to replay against"
            )
        with self._scratch() as scratch:
            replayed = replay(
                self.p.compute,
                proof_cluster(cluster.cluster),
                cluster.option,
                self.job(older.certified.uri),
                older.certified.step,
                pre,
                steps=s.parity_steps,
                tolerance=s.parity_tolerance,
                min_coverage=s.parity_min_coverage,
                timeout_s=s.first_step_timeout_s,
                scratch=scratch,
                poll_s=self.poll_s,
                clock=self.monotonic,
                sleep=self.sleep,
            )
        return dataclasses.replace(replayed, detail=f"{replayed.detail} (own steps: {own.detail})")

    @contextmanager
    def _scratch(self):
        """Where the replay's job writes: the spec's folder on a remote cluster, else a temp
        folder of this machine (local compute), removed after."""
        if self.spec.replay_scratch:
            yield self.spec.replay_scratch
            return
        with tempfile.TemporaryDirectory(prefix="lifeboat-proof-") as folder:
            yield folder

    def teardown(self, cluster: Provisioned) -> None:
        self.p.compute.teardown(cluster.cluster)
