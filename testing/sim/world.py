"""One history's world: two sites' stores, the compute API, the jobs on it, the control
planes' runs and machines, the outage — every parameter drawn from the choices.

The runbook `lb` trains on the primary (`aws/us-east-1`, store `memory://sim-primary`) and
fails over to the secondary (`gcp/us-central1`, store `memory://sim-secondary`). Its
primary job commits a checkpoint every 10 steps through the guarded commit. At
`outage_at` the primary region is cut off from everything else: its job keeps training
(`partition`: a zombie), dies (`dead`), or stalls and comes back after the heal (`stall`);
or only the job dies and the store answers on (`job-lost`).
Replicators run every few seconds; a control plane starts the failover a few seconds after
the outage, maybe a second one (on another worker, or the same), and after a heal maybe a
failback. Every drawn parameter is a `decide("param:…")`, so shrinking simplifies the
world too; a `Scenario` pins some of them (issue #27's cases, core/…/scenarios.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from lifeboat_dr.core.failover.proof import AUDIT_DIR_ENV
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.ledger_chain import LedgerChain
from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.compute.base import ClusterState, JobState, PlanOption
from lifeboat_dr.providers.compute.fake import FakeCompute
from lifeboat_dr.testing.memory_store import MemoryStore
from lifeboat_dr.testing.sim.faults import ComputeView, Coverage, FaultyStore
from lifeboat_dr.testing.sim.oracle import TRAINERS, Oracle
from lifeboat_dr.testing.sim.scheduler import BASE, Actor, Process, Scheduler

if TYPE_CHECKING:
    from lifeboat_dr.core.ledger import LedgerEntry

RUNBOOK = "lb"
PRIMARY_INFRA, SECONDARY_INFRA = "aws/us-east-1", "gcp/us-central1"
PRIMARY_CLUSTER, DR_CLUSTER = "lb-primary", "lb-dr"
EVERY = 10  # steps between checkpoints
STEP_S = 1.0  # virtual seconds per training step
# partition: the region cut off, its job a zombie; dead: region and job gone until the heal;
# stall: cut off, its job hung (after the save it was in) until the heal, then back; job-lost:
# only the job died (its host), the region's store still answers everyone
OUTAGES = ("partition", "dead", "stall", "job-lost")
THROTTLED = (  # (store, key prefix) answering 503 to everyone for a window
    None,
    ("secondary", "_lifeboat/lease.json"),
    ("primary", "_lifeboat/lease.json"),
    ("secondary", "_lifeboat/lock.json"),
    ("secondary", "_lifeboat/chain/"),
)
SKEWS = (  # an actor's clock: (skew, jump at outage + 10 s)
    (0.0, 0.0),
    (0.5, 0.0),
    (-0.5, 0.0),
    (600.0, 0.0),
    (-600.0, 0.0),
    (0.0, -600.0),
    (0.0, 600.0),
)


@dataclass(frozen=True)
class Fault:
    """A scripted fault: the requests it hits, by who makes them and what they touch."""

    fault: str  # one of faults.ALL_FAULTS but partition (a partition is the outage's)
    actor: str | None = None  # actor kind (replicator, failover, ...) or the start of its name
    op: str | None = None  # list, read, head, put, delete; compute, compute-act; ledger
    site: str | None = None  # the store's site: primary or secondary
    key: str | None = None  # a part of the key (or the compute call)
    phase: str | None = None  # the actor's step
    after: float = 0.0  # virtual seconds
    until: float = float("inf")
    times: int = 1  # how many matching requests it hits; 0: all

    def matches(self, actor, op: str, site: str | None, key: str, now: float) -> bool:
        return (
            (self.actor is None or actor.kind == self.actor or actor.name.startswith(self.actor))
            and (self.op is None or self.op == op)
            and (self.site is None or self.site == site)
            and (self.key is None or self.key in key)
            and (self.phase is None or self.phase == actor.phase)
            and self.after <= now < self.until
        )


@dataclass(frozen=True)
class Scenario:
    """A named history shape: parameters pinned (the rest drawn), fault rates for a seeded
    exploration of it. `pins` maps a parameter name to the index of its option. With a
    `script`, faults are exactly those scripted (a regression test reads like its incident)."""

    name: str
    pins: Mapping[str, int] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    about: str = ""
    script: tuple[Fault, ...] | None = None


@dataclass
class Job:
    """A job on a cluster: a trainer actor, its log and exit code."""

    cluster: str
    infra: str
    site: str  # whose store it writes
    epoch: int
    checkpoint: str | None  # what it resumes from
    run_id: str | None  # the run that started it (None: the original primary job)
    attempt: int | None
    process: Process
    log: list[str] = field(default_factory=list)
    rc: int | None = None  # None: running
    actor: Actor | None = None
    replay: bool = False  # a proof's replay (LIFEBOAT_AUDIT_DIR): it logs losses, writes nothing

    @property
    def lineage(self) -> str:
        return f"{self.site}@{self.epoch}"


@dataclass
class Run:
    """A failover or failback flow run: its attempts share the run id and the machine."""

    run_id: str
    kind: str  # failover | failback
    machine: str
    attempts: int = 0
    finished: bool = False  # its last attempt ended (not killed)
    rerun_left: int = 2
    outage_started_at: datetime | None = None  # its parameters, set by the automation at the first attempt
    detected_at: datetime | None = None


class Behind:
    """A site's store as the simulator itself sees it, behind the faults: the store (any
    `Store`; `MemoryStore` by default) plus `peek` and `snapshot`, from `MemoryStore`'s own
    helpers where it has them, else by reading (an out-of-tree backend's store)."""

    def __init__(self, store):
        self.store = store
        self.uri, self.capabilities = store.uri, store.capabilities

    def __getattr__(self, name):
        return getattr(self.store, name)

    def peek(self, key: str) -> bytes | None:
        if hasattr(self.store, "peek"):
            return self.store.peek(key)
        try:
            return b"".join(self.store.read(key))
        except NotFound:
            return None

    def snapshot(self, prefix: str = "") -> dict[str, bytes]:
        if hasattr(self.store, "snapshot"):
            return self.store.snapshot(prefix)
        out = {}
        for info in self.store.list(prefix):
            data = self.peek(info.key)
            if data is not None:
                out[info.key] = data
        return out


class _VirtualSeconds:
    """FakeCompute's clock: virtual seconds; its scripted delays sleep the calling actor."""

    def __init__(self, sched: Scheduler):
        self.sched = sched

    def __call__(self) -> float:
        return self.sched.now

    def sleep(self, seconds: float) -> None:
        self.sched.sleep(seconds)


class SimCompute(FakeCompute):
    """FakeCompute whose jobs are trainer actors: `run` starts one (a replaced job stops at
    once), `status` reports its exit, `logs` its log, `teardown` stops it."""

    def __init__(self, world: World):
        super().__init__(
            clock=_VirtualSeconds(world.sched), prices={"aws": 98.32, "gcp": 88.49}, job_seconds=None
        )
        self.world = world
        self.jobs: dict[str, Job] = {}

    def infra_of(self, cluster: str) -> str | None:
        c = self._clusters.get(cluster)
        return c.option.infra if c is not None else None

    def _start(self, cluster, c, job) -> None:
        super()._start(cluster, c, job)
        old = self.jobs.pop(cluster, None)
        self.jobs[cluster] = self.world.start_job(cluster, c.option.infra, job)  # judged while old runs
        if old is not None:
            self.world.stop_job(old)

    def status(self, cluster):
        st = super().status(cluster)
        job = self.jobs.get(cluster)
        if job is not None and st.state is ClusterState.UP and job.rc is not None:
            state = JobState.SUCCEEDED if job.rc == 0 else JobState.FAILED
            st = type(st)(**{**st.__dict__, "job": state, "returncode": job.rc})
        return st

    def logs(self, cluster) -> str:
        text = super().logs(cluster)
        job = self.jobs.get(cluster)
        return text + ("".join(line + "\n" for line in job.log) if job is not None else "")

    def teardown(self, cluster) -> None:
        job = self.jobs.pop(cluster, None)
        if job is not None:
            self.world.torn_down(job)
            self.world.stop_job(job)
        super().teardown(cluster)


class World:
    """See the module docstring."""

    def __init__(self, sched: Scheduler, scenario: Scenario | None = None, store_factory=None):
        self.sched = sched
        self.scenario = scenario or Scenario("random")
        self.coverage = Coverage()
        self.oracle = Oracle(self)
        self.crashable = {
            "failover",
            "failback",
            "replicator",
            "primary-trainer",
            "resumed-trainer",
            "zombie",
        }
        self.folder = Path(tempfile.mkdtemp(prefix="lifeboat-sim-", dir=_tmp_root()))
        make = store_factory or (lambda name, clock: MemoryStore(name, clock=clock))
        self._inner = {
            role: Behind(make(f"sim-{role}", self._true_time)) for role in ("primary", "secondary")
        }
        self.stores = {role: FaultyStore(self, inner, role) for role, inner in self._inner.items()}
        self.compute_api = SimCompute(self)
        self.compute = ComputeView(self, self.compute_api)
        self.jobs: list[Job] = []
        self.runs: dict[str, Run] = {}
        self.script_hits: dict[int, int] = {}  # scripted fault -> requests it hit
        self.unwritten: dict[str, bool] = {}  # run id -> its last ledger write was refused (a full disk)
        self.broken: BaseException | None = None  # the oracle's own error, if it had one
        # what actors.py gives the world (it imports the world, not the other way round): a
        # job's body, and a run's next attempt
        self.trainer = None
        self.start_attempt = None
        self.draw_parameters()
        self._machine: str | None = None
        self._ledger_files: dict[str, str] = {}
        self._ledger_before = os.environ.get("LIFEBOAT_LEDGER")  # put back by close()
        sched.on_switch = self._switched

    # -- parameters -------------------------------------------------------------------------
    def draw(self, name: str, options: tuple):
        """One of `options` (the first is the plain one), pinned by the scenario or drawn."""
        pinned = self.scenario.pins.get(name)
        index = pinned if pinned is not None else self.sched.decide(f"param:{name}", len(options))
        return options[index]

    def draw_parameters(self) -> None:
        # big checkpoints: each shard a replicator reads or writes takes seconds, so copies are
        # in flight across fences and commits (the window of a real multi-GB cross-region copy);
        # the outage then comes a minute later, when replicas had time to land
        self.shard_s = self.draw("big_shards", (0.0, 8.0))
        self.outage = self.draw("outage", OUTAGES)
        self.outage_at = self.draw("outage_at", (31.0, 25.0, 37.0, 44.0)) + (60.0 if self.shard_s else 0.0)
        heal = self.draw("heal_after", (90.0, None, 40.0, 150.0))
        self.heal_at = None if heal is None else self.outage_at + heal
        self.failback = self.heal_at is not None and self.draw("failback", (True, False))
        self.failback_at = (
            self.heal_at + self.draw("failback_after", (20.0, 5.0, 60.0)) if self.failback else None
        )
        self.failover_after = self.draw("detect_after", (6.0, 2.0, 15.0))
        self.second = self.draw("second_control_plane", (None, "another-worker", "same-worker"))
        self.replicators = self.draw("replicators", (1, 2))
        self.period = self.draw("replicate_every", (12.0, 5.0, 20.0))
        self.colocated = self.draw("replicator_machine", (True, False))
        self.keep_last = self.draw("keep_last", (2, 1))
        self.ledger = self.draw("ledger", ("file", "chain"))  # LIFEBOAT_LEDGER_CHAIN unset, or sites
        # one hot key throttled for a while (S3's SlowDown is per prefix): correlated faults
        self.throttle = self.draw("throttle", THROTTLED)
        self.throttle_window = (0.0, 0.0)
        if self.throttle is not None:
            start = self.draw("throttle_at", (self.heal_at or self.outage_at + 30.0, self.outage_at + 10.0))
            self.throttle_window = (start, start + self.draw("throttle_for", (120.0, 30.0, 300.0)))
        self.skews = {  # mostly true (the seed's rates make a skew rare)
            role: self.draw(f"clock:{role}", SKEWS)
            for role in ("primary-trainer", "resumed-trainer", "cp-a", "cp-b", "worker")
        }
        last = max(t for t in (self.outage_at + 100.0, self.heal_at, self.failback_at) if t is not None)
        self.end = last + 80.0
        self.sched.horizon = self.end + 900.0

    def clock_for(self, actor: Actor, role: str) -> None:
        skew, jump = self.skews.get(role, (0.0, 0.0))
        actor.clock.skew_s = skew
        actor.clock.jump_at, actor.clock.jump_s = (self.outage_at + 10.0, jump) if jump else (None, 0.0)

    # -- stores, regions, machines ------------------------------------------------------------
    def _true_time(self):
        from datetime import timedelta

        return BASE + timedelta(seconds=self.sched.now)

    def inner(self, role: str) -> Behind:
        return self._inner[role]

    def locate(self, uri: str) -> tuple[str, str]:
        """(store role, top-level directory) of a checkpoint URI."""
        for role, store in self._inner.items():
            root = store.uri.rstrip("/") + "/"
            if uri.startswith(root):
                return role, uri[len(root) :].strip("/").split("/")[0]
        raise ValueError(f"not a checkpoint of this world: {uri}")

    def open_store(self, uri: str) -> FaultyStore:
        for role, store in self._inner.items():
            if uri.rstrip("/") == store.uri:
                return self.stores[role]
        raise ValueError(f"no store {uri} in this world")

    def cut_off(self) -> bool:
        if self.outage == "job-lost":
            return False
        return self.outage_at <= self.sched.now and (self.heal_at is None or self.sched.now < self.heal_at)

    @staticmethod
    def hot_key(key: str) -> bool:
        """Whether `key` is one a throttle can hit (the lease, the lock, the ledger chain)."""
        return any(t is not None and key.startswith(t[1]) for t in THROTTLED)

    def throttled(self, role: str, key: str) -> bool:
        """Whether a request for `key` on `role`'s store is refused as throttled now."""
        if self.throttle is None or self.throttle[0] != role or not key.startswith(self.throttle[1]):
            return False
        return self.throttle_window[0] <= self.sched.now < self.throttle_window[1]

    def reachable(self, actor: Actor, role: str) -> bool:
        if not self.cut_off():
            return True
        inside = getattr(actor, "region", "control") == "primary"
        if role == "primary":
            return inside and self.outage in ("partition", "stall")  # the region itself is up
        return not inside

    def crosses(self, actor: Actor, site: str | None, what: str) -> bool:
        """Whether a request goes across the primary region's border (a partition could cut
        it): to the primary's store or compute from outside, to the secondary's from inside."""
        inside = getattr(actor, "region", "control") == "primary"
        if site is not None:
            return (site == "primary") != inside
        cluster = what.split()[-1] if what.split() else ""
        infra = self.compute_api.infra_of(cluster) if cluster else None
        return infra is not None and (infra == PRIMARY_INFRA) != inside

    def reaches_infra(self, actor: Actor, infra: str) -> bool:
        if not self.cut_off():
            return True
        inside = getattr(actor, "region", "control") == "primary"
        return inside == (infra == PRIMARY_INFRA)

    def ledger_path(self, machine: str) -> Path:
        return self.folder / machine / "ledger.jsonl"

    def _switched(self, actor: Actor) -> None:
        if actor.machine != self._machine:  # the local ledger file it sees (retention reads it)
            self._machine = actor.machine
            os.environ["LIFEBOAT_LEDGER"] = self._ledger_files.get(actor.machine) or self._ledger_file(
                actor.machine
            )

    def _ledger_file(self, machine: str) -> str:
        self._ledger_files[machine] = str(self.ledger_path(machine))
        return self._ledger_files[machine]

    def ledger_entry(self, run: Run) -> LedgerEntry | None:
        """The run's entry as its re-run would read it: the machine's file, or with the ledger
        chain the newer of the file's and the chain's (read behind the faults)."""
        entries = [
            e for e in LedgerFile(self.ledger_path(run.machine)).read(RUNBOOK) if e.run_id == run.run_id
        ]
        if self.ledger == "chain":
            chain = LedgerChain([self.inner("secondary"), self.inner("primary")])
            entries += [e for e in [chain.entry(RUNBOOK, run.run_id)] if e is not None]
        return max(entries, key=lambda e: e.revision, default=None)

    # -- the oracle's hooks ---------------------------------------------------------------------
    def landed(self, role: str, key: str, old: bytes | None, new: bytes | None) -> None:
        self.oracle.landed(role, key, old, new)

    def fenced(self) -> None:
        """A new epoch landed: running trainers of older epochs are zombies from now on."""
        for job in self.jobs:
            if job.rc is None and job.actor is not None and job.epoch < self.oracle.max_epoch:
                job.actor.kind = "zombie"

    def crashed(self, actor: Actor) -> None:
        self.sched.kill(actor.process)
        run: Run | None = getattr(actor, "run", None)
        if run is not None:
            self.oracle.attempt_killed(run.run_id, self.ledger_entry(run))
        if run is None or not run.rerun_left:
            return
        delay = self.draw_rerun()
        if delay is not None:
            run.rerun_left -= 1
            self.start_attempt(self, run, at=self.sched.now + delay)

    def draw_rerun(self) -> float | None:
        """When the crashed run runs again: the crash automation's 60 s of silence and the
        lock's lease lapse, a later manual re-run, or never."""
        return self.draw("rerun", (65.0, 125.0, None))

    # -- jobs ---------------------------------------------------------------------------------------
    def start_job(self, cluster: str, infra: str, spec) -> Job:
        starter = self.sched.current
        run: Run | None = getattr(starter, "run", None)
        env = spec.resume_envs()
        store_uri = env.get("LIFEBOAT_STORE") or spec.store_uri
        site = self.locate(store_uri.rstrip("/") + "/x")[0]
        replay = AUDIT_DIR_ENV in env  # the proof's replay: no run's job, judged by nothing
        job = Job(
            cluster=cluster,
            infra=infra,
            site=site,
            epoch=int(env.get("LIFEBOAT_EPOCH", "0")),
            checkpoint=spec.checkpoint,
            run_id=run.run_id if run and not replay else None,
            attempt=getattr(starter, "attempt", None),
            process=Process(f"job:{cluster}:{len(self.jobs) + 1}"),
            replay=replay,
        )
        kind = "resumed-trainer" if spec.checkpoint else "primary-trainer"
        actor = self.sched.spawn(job.process.name, kind, lambda: self.trainer(self, job), process=job.process)
        actor.region = "primary" if infra == PRIMARY_INFRA else "secondary"
        actor.lineage = job.lineage
        self.clock_for(actor, kind)
        job.actor = actor
        self.jobs.append(job)
        if not replay:
            self.oracle.job_started(job, self.jobs)
        return job

    def stop_job(self, job: Job) -> None:
        if job.rc is None:
            job.rc = 137
        self.sched.kill(job.process)

    def torn_down(self, job: Job) -> None:
        if job.replay:  # the proof's own cluster, given back when it has its steps
            return
        starter = self.sched.current
        run = getattr(starter, "run", None)
        self.oracle.torn_down(job, run.run_id if run else None, getattr(starter, "attempt", None))

    def primary_option(self) -> PlanOption:
        return PlanOption(PRIMARY_INFRA, "p5.48xlarge", "H100:8", False, None, rank=0)

    def secondary_option(self) -> PlanOption:
        return PlanOption(SECONDARY_INFRA, "a3-highgpu-8g", "H100:8", False, None, rank=0)

    def close(self) -> None:
        """Remove the world's files and give the process its own LIFEBOAT_LEDGER back (the
        world points it at the ledger of whichever machine runs: a later test would write
        into a folder that is gone)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._ledger_before is None:
            os.environ.pop("LIFEBOAT_LEDGER", None)
        else:
            os.environ["LIFEBOAT_LEDGER"] = self._ledger_before


def _tmp_root() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


__all__ = ["TRAINERS", "Fault", "Job", "Run", "Scenario", "World"]
