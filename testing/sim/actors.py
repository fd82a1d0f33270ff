"""The actors of a history, each running the real core the way its flow or job does.

- `trainer`: a job on a cluster (the primary's, or one a failover or failback started):
  trains (virtual time), saves every `EVERY` steps — shards, the guarded commit
  (`lifeboat_dr.core.fencing.guarded_commit`, as `commit_or_exit` does), the manifest
  (`build_manifest` + `commit_manifest`) — and exits 75 when fenced out, as
  `commit_or_exit` makes it. A resumed job first loads its checkpoint from the store.
- `replicator`: the `replicate` deployment's schedule; each pass is the flow's body
  (flows/replicate.py) without Prefect: `direction`, `sources_to_replicate`,
  `replicate_checkpoints` with the guard (retried twice, as its task is), `retention_for`.
- `control_plane`: one attempt of a failover or failback flow run (flows/failover.py,
  flows/failback.py): the runbook lock, then `walk.execute` over the real `ProviderSteps`
  / `FailbackSteps` built as flows/wiring.py builds them, each step an actor of its own
  (`SimRunner`), the ledger a `LedgerFile` on the run's machine.
- `SimGate`: the person at the approval gate: late (seconds to minutes), now and then
  rejecting; each card is decided, so a re-run or a second control plane is approved again.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager, suppress
from datetime import timedelta

from lifeboat_dr.core.checkpoints.layouts import discover
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, Manifest, build_manifest, commit_manifest
from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.failover import walk
from lifeboat_dr.core.failover.contract import FailoverSettings
from lifeboat_dr.core.failover.failback import FailbackSteps
from lifeboat_dr.core.failover.steps import Providers, ProviderSteps, StepSpec
from lifeboat_dr.core.fencing import COMMIT_MARKER, guarded_commit
from lifeboat_dr.core.ledger import LedgerFile, RtoLedger
from lifeboat_dr.core.ledger_chain import LedgerChain, TeedLedger
from lifeboat_dr.core.lock import DEFAULT_LEASE_S, RunbookLock, one_replication_pass
from lifeboat_dr.core.prestage import PrestageReadiness
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.replication.direction import (
    ReplicationSettings,
    direction,
    hand_back,
    replicate_by_site_state,
    sources_to_replicate,
)
from lifeboat_dr.core.retention import RetentionPolicy, retention_for
from lifeboat_dr.core.transfer import RetryPolicy
from lifeboat_dr.kernel.errors import (
    LifeboatError,
    NotFound,
    ProviderUnavailable,
    StandDown,
    StopFailover,
    WriteFailed,
)
from lifeboat_dr.providers.chat.base import ApprovalDecision
from lifeboat_dr.providers.compute.base import JobSpec
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.testing.sim.faults import Coverage
from lifeboat_dr.testing.sim.scheduler import Killed, Process
from lifeboat_dr.testing.sim.seams import SimFuture, inherit
from lifeboat_dr.testing.sim.world import (
    DR_CLUSTER,
    EVERY,
    PRIMARY_CLUSTER,
    PRIMARY_INFRA,
    RUNBOOK,
    STEP_S,
    Job,
    Run,
    World,
)

LOSS_LOG = "loss-log.jsonl"  # the runbook's pre-failure loss log, kept in the primary store
CHUNK = 10  # steps a trainer runs between two turns (a checkpoint interval)
PASSES_AT_ONCE = 2  # replication passes of one deployment running at once, at most
JOB_S = 90.0  # a job runs at least this long (virtual seconds) after it started
RPO_TARGET = timedelta(minutes=1)


def loss(step: int) -> float:
    return round(2.0 / (1.0 + 0.01 * step), 9)


def settings(world: World) -> ReplicationSettings:
    return ReplicationSettings(
        RUNBOOK, "manifest", RPO_TARGET, RetentionPolicy(world.keep_last), loss_log_key=LOSS_LOG
    )


def _retrying(world: World, call, tries: int = 5):
    """A storage client's own retries (a trainer's saves and loads): a job rides out a few
    failed requests; its guarded commit is not retried (`commit_or_exit` stops on what it raises)."""
    for attempt in range(tries):
        try:
            return call()
        except ProviderUnavailable:
            if attempt == tries - 1:
                raise
            world.sched.sleep(2.0)
    raise AssertionError("unreachable")


# -- the job -----------------------------------------------------------------------------------
def trainer(world: World, job: Job) -> int:
    sched, me = world.sched, world.sched.current
    me.save = None
    until = max(world.end, sched.now + JOB_S)  # a job started late still runs a while
    try:
        step = _load(world, job) if job.checkpoint else 0
        if job.checkpoint:
            job.log.append(json.dumps({"event": "loaded", "step": step, "ts": me.clock().timestamp()}))
        while sched.now < until:
            me.phase = "train"
            if world.outage == "stall" and me.region == "primary" and world.cut_off():
                sched.sleep((world.heal_at or world.end) - sched.now)  # hung, then back: a zombie
                continue
            sched.sleep(CHUNK * STEP_S)
            for _ in range(CHUNK):
                step += 1
                job.log.append(json.dumps({"step": step, "loss": loss(step)}))
                if step % EVERY == 0 and not job.replay and _save(world, job, step):
                    job.log.append("lifeboat: fenced out, exiting")
                    job.rc = 75
                    return 75
            if job.site == "primary" and not job.replay:  # the runbook's loss log, in the primary store
                me.phase = "loss-log"
                text = "".join(line + "\n" for line in job.log if '"loss"' in line)
                _retrying(world, lambda text=text: store_of(world, job).put(LOSS_LOG, text.encode()))
        job.rc = 0
        return 0
    except Killed:  # SIGKILL: its host died, or it was stopped
        if job.rc is None:
            job.rc = 137
        raise
    except BaseException:
        job.rc = 1
        raise


def _load(world: World, job: Job) -> int:
    me = world.sched.current
    me.phase = "load"
    role, prefix = world.locate(job.checkpoint)
    store = world.stores[role]
    raw = _retrying(world, lambda: b"".join(store.read(f"{prefix}/{MANIFEST_NAME}")))
    manifest = Manifest.from_json(raw, where=job.checkpoint)
    read = {MANIFEST_NAME: raw}
    for shard in manifest.shards:
        read[shard.path] = _retrying(world, lambda s=shard: b"".join(store.read(f"{prefix}/{s.path}")))
    world.oracle.loaded(job, role, prefix, read)
    return manifest.step


def _save(world: World, job: Job, step: int) -> bool:
    """Save and commit checkpoint `step`; True when fenced out (the job exits)."""
    me = world.sched.current
    store = world.stores[job.site]
    prefix = f"step-{step:08d}"
    me.phase = "shard"
    me.save = world.oracle.begin_save(me, job.site, job.epoch, step, prefix)
    for info in _retrying(world, lambda: list(store.list(prefix + "/"))):  # an older lineage's: replaced
        _retrying(world, lambda key=info.key: store.delete(key))
    for i in range(2):
        body = json.dumps(
            {"writer": me.name, "lineage": job.lineage, "step": step, "shard": i, "save": me.save.id}
        )
        _retrying(world, lambda i=i, body=body: store.put(f"{prefix}/shard-{i}.bin", body.encode()))
    me.phase = "commit"
    try:
        guarded_commit(store, f"{prefix}/{COMMIT_MARKER}", job.epoch, step, clock=me.clock)
    except StopFailover:
        return True
    me.phase = "manifest"
    manifest = dataclasses.replace(
        _retrying(world, lambda: build_manifest(store, prefix, step)), created=me.clock()
    )
    _retrying(world, lambda: commit_manifest(store, prefix, manifest))
    return False


def store_of(world: World, job: Job):
    return world.stores[job.site]


def start_primary(world: World) -> Job:
    """The primary's job, launched before the history starts (no faults: set-up)."""
    spec = JobSpec(name=RUNBOOK, command="sim-train", store_uri=world.inner("primary").uri)
    world.compute_api.launch(PRIMARY_CLUSTER, world.primary_option(), spec)
    return world.compute_api.jobs[PRIMARY_CLUSTER]


def outage(world: World, primary: Job) -> None:
    """At the outage a dead region takes its job with it."""
    if world.outage in ("dead", "job-lost"):
        world.stop_job(primary)


# -- replication -------------------------------------------------------------------------------
def replicator(world: World, index: int, machine: str) -> None:
    """The deployment's schedule: a pass every `period` until the end (passes may overlap)."""
    sched, n, running = world.sched, 0, []
    while sched.now < world.end:
        running = [a for a in running if not a.done]
        if len(running) < PASSES_AT_ONCE:  # the deployment's concurrency limit
            n += 1
            actor = sched.spawn(f"replicate-{index}#{n}", "replicator", lambda: replicate_pass(world))
            actor.machine = machine
            world.clock_for(actor, "worker")
            running.append(actor)
        sched.sleep(world.period)


def replicate_pass(world: World) -> None:
    """The `replicate` flow over the two stores (flows/replicate.py): one pass at a time."""
    me = world.sched.current
    me.phase = "lock"
    try:
        with one_replication_pass(
            world.stores["secondary"], RUNBOOK, me.name, clock=me.clock, sleep=world.sched.sleep
        ):
            _one_pass(world)
    except StandDown:
        return  # another pass runs: this one changes nothing


def _one_pass(world: World) -> None:
    me, s = world.sched.current, settings(world)
    primary, secondary = world.stores["primary"], world.stores["secondary"]
    me.phase = "direction"
    way = direction(s.runbook, primary, secondary)
    guard = way.guard(s.runbook, {"primary": primary, "secondary": secondary})
    me.phase = "sources"
    sources = sources_to_replicate(s, way)
    for attempt in range(3):  # the copy task: retries=2, retry_delay_seconds=30
        me.phase = "copy"
        try:
            report = replicate_checkpoints(
                way.source,
                way.destination,
                sources,
                rpo_target=s.rpo_target,
                guard=guard,
                clock=me.clock,
                retry=RetryPolicy(sleep=world.sched.sleep),
                also=s.also_copied(way.source_role),
                destination_found=discover(way.destination, s.layout),
            )
            break
        except Exception:
            if attempt == 2:
                raise
            world.sched.sleep(30.0)
    me.phase = "retention"
    retention_for(
        way.destination,
        way.source,
        runbook=s.runbook,
        layout=s.layout,
        policy=s.retention,
        secondary_found=report.destination_found,
        sites=way.sites,
        planned=way.state,
    )


# -- the control planes ----------------------------------------------------------------------
class SimGate:
    """See the module docstring."""

    decides_at_once = False  # a person: the walk prepares nothing past the gate

    def __init__(self, world: World):
        self.world = world
        self.notes: list[str] = []

    def request(self, card, ledger) -> ApprovalDecision:
        sched, me = self.world.sched, self.world.sched.current
        me.phase = "approval"
        try:
            sched.point("chat.post card")
            ledger.mark("approval_requested")
            sched.sleep(self.world.draw("approval_after", (20.0, 5.0, 90.0, 400.0)))
            if sched.decide("person:reject", 2):
                ledger.fail("approval_granted", "rejected by U-sim", outcome="aborted")
                return ApprovalDecision(approved=False, reason="not now", approver="U-sim")
            ledger.mark("approval_granted")
            return ApprovalDecision(approved=True, reason="go", approver="U-sim")
        finally:
            me.phase = "walk"

    def announce(self) -> None:
        return None

    def notify(self, text: str) -> None:
        self.world.sched.point("chat.notify")
        self.notes.append(text)


class SimRunner:
    """The walker's `Runner`: each step an actor of the run's process (the threads of
    `ThreadRunner`, scheduled), retried on `ProviderUnavailable` as the settings say."""

    def __init__(self, world: World, settings: FailoverSettings):
        self.world, self.settings = world, settings

    def start(self, name: str, call, *args):
        sched = self.world.sched
        parent = sched.current
        future = SimFuture(sched)  # the walker may wait on it at once (a rollback's certify)

        def body() -> None:
            me = sched.current
            for attempt in range(self.settings.retries + 1):
                started = me.clock()
                try:
                    value = call(*args)
                except ProviderUnavailable as e:
                    if attempt == self.settings.retries:
                        future.set_exception(e)
                        return
                    sched.sleep(self.settings.retry_delay_s)
                    continue
                except Killed:
                    raise
                except BaseException as e:  # noqa: BLE001 - the walker reads it from the future
                    future.set_exception(e)
                    return
                self._checked(parent.run.run_id, name, value)
                if name == "prove":
                    self.world.oracle.proved(parent.run.run_id, getattr(parent, "attempt", None))
                future.set_result(walk.Timed(value, started, me.clock()))
                return

        child = sched.spawn(f"{parent.name}/{name}", parent.kind, body, process=parent.process)
        inherit(child, parent, name)
        return walk._Handle(future)

    def _checked(self, run_id: str, name: str, value) -> None:
        oracle = self.world.oracle
        kind = self.world.runs[run_id].kind
        if name == "certify" and kind == "failover":  # a failback resumes from what its fence certifies
            oracle.certified(run_id, value.certified.uri, "certified")
        elif name == "fence" and getattr(value, "checkpoint", None) is not None:
            oracle.certified(run_id, value.checkpoint.certified.uri, "resumes (failback's hand-back) from")

    def result(self, handle) -> walk.Timed:
        return handle.future.result()

    def prepare(self, name: str) -> None:
        return None

    def settle(self) -> None:
        return None

    def went_on(self, ended, started) -> None:
        return None


def failover_settings() -> FailoverSettings:
    return FailoverSettings(
        runbook=RUNBOOK,
        rto_target=timedelta(minutes=10),
        rpo_target=RPO_TARGET,
        retries=2,
        retry_delay_s=5.0,
        step_timeout_s=900.0,
    )


def _spec(world: World, *, failback: bool) -> StepSpec:
    primary, secondary = world.inner("primary").uri, world.inner("secondary").uri
    target = primary if failback else secondary

    def job(uri: str) -> JobSpec:
        return JobSpec(
            name=RUNBOOK,
            command="sim-train",
            resume_env="LIFEBOAT_RESUME",
            checkpoint=uri,
            store_uri=target,
            primary_store_uri=secondary if failback else primary,
        )

    def loss_log() -> str:  # the secondary's copy of the log kept in the primary store
        try:
            return b"".join(world.stores["secondary"].read(LOSS_LOG)).decode()
        except NotFound:
            return ""

    return StepSpec(
        layout="manifest",
        blocked=() if failback else (PRIMARY_INFRA,),
        candidates=(world.primary_option(),) if failback else (world.secondary_option(),),
        provision_budget_s=600.0,
        first_step_timeout_s=120.0,
        parity_steps=2,
        parity_tolerance=1e-6,
        job=job,
        quorum=QuorumPolicy(signals=("provider",)),
        probes=lambda: (),
        prestage=lambda: PrestageReadiness(True, (), ()),
        loss_log=None if failback else loss_log,
        primary_cluster=None if failback else PRIMARY_CLUSTER,
        activates="primary" if failback else "secondary",
    )


def start_attempt(world: World, run: Run, at: float) -> None:
    """Schedule the next attempt of `run` (the first, or a re-run after a crash)."""
    run.attempts += 1
    attempt = run.attempts
    process = Process(f"{run.run_id}#{attempt}")
    actor = world.sched.spawn(
        process.name, run.kind, lambda: control_plane(world, run, attempt), process=process, at=at
    )
    actor.run, actor.attempt, actor.machine = run, attempt, run.machine
    world.clock_for(actor, run.machine)


def control_plane(world: World, run: Run, attempt: int) -> None:
    """One attempt of the flow run, as flows/failover.py and flows/failback.py run it: the
    ledger reopened on the run's entry (a re-run goes on from it), the runbook's lock held
    around the walk as `Guard.acting` holds it (flows/guard.py), a stand-down recorded."""
    me = world.sched.current
    me.phase = "start"
    settings_ = failover_settings()
    sink = _sink(world, run)
    ledger = RtoLedger(
        RUNBOOK,
        run.run_id,
        rto_target=settings_.rto_target,
        rpo_target=settings_.rpo_target,
        kind=run.kind,
        sink=sink,
        clock=me.clock,
        prior=sink.entry(RUNBOOK, run.run_id),  # build_ledger(reopen=True)
    )
    steps = _steps(world, run)
    gate = SimGate(world)
    try:
        with _acting(world, run, ledger, gate):
            walk.execute(
                settings_,
                steps,
                ledger,
                gate,
                run_id=run.run_id,
                runner=SimRunner(world, settings_),
                clock=me.clock,
            )
    except StandDown as e:  # as the flows: a re-run reads back an earlier attempt's fence
        if ledger.prior is not None:
            walk.fence_read_back(steps, ledger, "this re-run stood down")
        ledger.note("stood down", str(e))
        ledger.finish("stood-down")
    except Killed:
        raise
    except BaseException as e:
        if isinstance(e, LifeboatError) and ledger.prior is not None:  # as the flows do
            with suppress(WriteFailed):
                walk.fence_read_back(steps, ledger, f"this re-run failed ({e})")
        run.finished = True
        world.oracle.run_ended(run.run_id)
        raise
    run.finished = True
    world.oracle.run_ended(run.run_id)


@contextmanager
def _acting(world: World, run: Run, ledger: RtoLedger, gate: SimGate):
    """`Guard.acting`: the runbook's lock (core/lock.py) in the secondary store, for the walk."""
    me = world.sched.current
    lock = RunbookLock(
        world.stores["secondary"],
        RUNBOOK,
        run.run_id,
        action=run.kind,
        lease_s=DEFAULT_LEASE_S,
        clock=me.clock,
        sleep=world.sched.sleep,
    )
    me.phase = "lock"
    try:
        lock.acquire()
    except StandDown:
        raise
    except LifeboatError as e:  # the store did not answer: nothing acted
        ledger.fail("confirmed", f"could not take the runbook's lock: {e}")
        raise
    try:
        if lock.reclaimed is not None:
            text = f"took the failover lock of {RUNBOOK} from {lock.reclaimed.describe()}"
            ledger.note("lock reclaimed", text)
            gate.notify(text)
        me.phase = "walk"
        yield
    finally:
        world.oracle.done_acting(run.run_id)
        me.phase = "unlock"
        lock.release()


def _sink(world: World, run: Run):
    """`build_ledger`'s sink: the machine's ledger file and, with `LIFEBOAT_LEDGER_CHAIN=sites`,
    the ledger chain in both sites' stores (the secondary first)."""
    from lifeboat_dr.testing.sim.faults import LedgerSink

    file = LedgerSink(world, LedgerFile(world.ledger_path(run.machine)))
    if world.ledger != "chain":
        return file
    return TeedLedger(file, LedgerChain([world.stores["secondary"], world.stores["primary"]]))


def _steps(world: World, run: Run) -> ProviderSteps:
    sched, me = world.sched, world.sched.current
    primary, secondary = world.stores["primary"], world.stores["secondary"]
    registry = FakeRegistry()
    common = dict(
        run_id=run.run_id,
        clock=me.clock,
        poll_s=2.0,
        sleep=sched.sleep,
        monotonic=me.clock.monotonic,
    )
    if run.outage_started_at is None:  # the flow run's parameters: a re-run keeps them
        run.outage_started_at = me.clock() - timedelta(seconds=world.failover_after)
        run.detected_at = me.clock()
    if run.kind == "failover":
        return ProviderSteps(
            _spec(world, failback=False),
            Providers(primary, secondary, world.compute, registry, world.open_store),
            cluster=DR_CLUSTER,
            outage_started_at=run.outage_started_at,
            detected_at=run.detected_at,
            evidence=("sim: primary region unreachable (provider, checkpoint freshness)",),
            **common,
        )
    s = settings(world)
    return FailbackSteps(
        _spec(world, failback=True),
        Providers(secondary, primary, world.compute, registry, world.open_store),  # roles swapped
        cluster=PRIMARY_CLUSTER,
        standby_cluster=DR_CLUSTER,
        catch_up=lambda: replicate_by_site_state(s, primary, secondary),
        hand_back=lambda: hand_back(s, primary, secondary),
        stop_timeout_s=max(2 * EVERY * STEP_S, 10.0),
        **common,
    )


__all__ = ["Coverage", "replicator", "start_attempt", "start_primary", "trainer"]
