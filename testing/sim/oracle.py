"""The ground truth of a history, and the invariants checked against it.

The oracle sees every write and delete that lands on a store (from `FaultyStore`, with the
object's bytes before and after), every fence and guarded commit (the lease writes among
them), what each failover certified and what each resumed job loaded. Every object a
trainer writes is registered with its `Save` (the checkpoint it belongs to), so a copy
anywhere is known by its bytes. A save's commit *counts* when its guarded commit's lease
write landed while its epoch was still the newest anywhere — true virtual time, no clock —
and a save whose commit did not count is a *fenced-out write*.

Invariants (issue #28, item 3), each with the id a violation carries:

- `fenced-out-copied`: no fenced-out write is ever copied to another site;
- `active-overwritten`: no object of a counted checkpoint of the active lineage on the
  active site's store is overwritten or deleted by anyone but that lineage's own trainer;
- `certified-bad` / `resumed-bad`: nothing partial, hybrid, uncommitted or fenced out is
  certified by a failover or loaded by the job it resumes, nor a checkpoint off the chain
  of the lineage it takes over (a newer checkpoint of a lineage that lineage forked from:
  a branch it never continued);
- `newest-deleted` / `none-certifiable` / `in-use-deleted`: retention never deletes the
  newest certifiable checkpoint, never leaves none where there was one, and never deletes
  the checkpoint a running failover resumes from;
- `two-acting` / `second-fence` / `self-fenced` / `restarted` / `torn-down`: one failover
  or failback of the runbook acts at a time (no run changes a store or a cluster while an
  attempt of another run that already did is still going), a run takes at most one epoch,
  a fence never fences out the lineage the previous fence made active (two failovers at
  once), a re-run never restarts or tears down the job an earlier attempt of the same run
  started;
- `ledger-negative-rpo` / `ledger-missed` / `ledger-invented` / `ledger-checkpoint`: the
  ledger of every run that finished records its fence and the checkpoint its job
  resumed from, nothing that did not happen, and never a negative RPO (clamped to 0)
  where the run truly lost work;
- `commit-landed-stopped`: a commit that landed never stops its trainer (a lost reply);
- `bare-error`: Lifeboat's own actors stop on a `LifeboatError` (one line), never a bare
  `OSError` or a traceback; `hung`: the history ends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME
from lifeboat_dr.core.clocks import CLOCK_KEY
from lifeboat_dr.core.fencing import COMMIT_MARKER, LEASE_KEY, Lease
from lifeboat_dr.core.ledger_chain import PREFIX as CHAIN_PREFIX
from lifeboat_dr.core.lock import LOCK_KEY, REPLICATION_LOCK_KEY
from lifeboat_dr.kernel.errors import LifeboatError

if TYPE_CHECKING:
    from lifeboat_dr.testing.sim.scheduler import Actor

TRAINERS = ("primary-trainer", "resumed-trainer", "zombie")
INVARIANTS = (
    "fenced-out-copied",
    "active-overwritten",
    "certified-bad",
    "resumed-bad",
    "newest-deleted",
    "none-certifiable",
    "in-use-deleted",
    "two-acting",
    "second-fence",
    "self-fenced",
    "restarted",
    "torn-down",
    "ledger-negative-rpo",
    "ledger-missed",
    "ledger-invented",
    "ledger-checkpoint",
    "commit-landed-stopped",
    "bare-error",
    "hung",
)


@dataclass
class Save:
    """One checkpoint as its trainer wrote it: every object by relative key."""

    id: int
    writer: str  # the trainer actor
    site: str  # the store it wrote to: primary or secondary
    epoch: int  # the epoch it committed under (LIFEBOAT_EPOCH)
    step: int
    prefix: str  # its directory, e.g. step-00000030
    keys: dict[str, bytes] = field(default_factory=dict)
    counted: bool | None = None  # None: no guarded commit landed
    committed_at: float | None = None  # virtual seconds: when its commit's lease write landed
    marker_landed: bool = False
    manifest: bool = False

    @property
    def lineage(self) -> str:
        return f"{self.site}@{self.epoch}"

    def describe(self) -> str:
        state = {None: "uncommitted", True: "counted", False: "fenced out"}[self.counted]
        return f"{self.prefix} of {self.lineage} ({self.writer}, {state})"


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    at: float  # virtual seconds
    actor: str

    def line(self) -> str:
        return f"[{self.invariant}] t={self.at:.2f}s {self.actor}: {self.message}"


@dataclass(frozen=True)
class Fence:
    epoch: int
    active: str
    run_id: str
    at: float


def _older(checkpoint: str | None, than: str | None) -> bool:
    """Whether checkpoint URI `checkpoint` is of an older step than `than` (`…/step-00000020`)."""

    def step(uri: str | None) -> int | None:
        tail = (uri or "").rstrip("/").rsplit("/", 1)[-1]
        return int(tail[5:]) if tail.startswith("step-") and tail[5:].isdigit() else None

    a, b = step(checkpoint), step(than)
    return a is not None and b is not None and a < b


def _hook(method):
    """An oracle entry point: its own failure is the simulator's bug, kept for `run_history`
    to raise, never an error the calling actor could swallow as a provider's."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            self.world.broken = self.world.broken or e
            raise

    return guarded


class Oracle:
    def __init__(self, world):
        self.world = world
        self.by_bytes: dict[bytes, Save] = {}
        self.saves: list[Save] = []
        self.max_epoch = 0
        self.active = "primary"
        self.fences: list[Fence] = []
        self.violations: list[Violation] = []
        self.in_use: dict[tuple[str, str], str] = {}  # (store role, prefix) -> run id resuming from it
        self._in_use_lost: list[tuple[str, float, str, str]] = []  # judged at the end: did that run fence?
        self.resumed_from: dict[str, Save] = {}  # run id -> the save its (last) job loaded
        self.forks: dict[str, tuple[str, int]] = {}  # lineage -> (lineage, step) its (last) job resumed from
        self._seen: set[tuple[str, str]] = set()
        # run id -> (its acting attempt's process, since when, its first act)
        self.acting: dict[str, tuple[object, float, str]] = {}
        self._proved: set[tuple[str, int | None]] = set()  # (run id, attempt) that proved parity

    # -- recording ---------------------------------------------------------------------------
    def violate(
        self, invariant: str, message: str, *, at: float | None = None, by: str | None = None, once: str = ""
    ) -> None:
        """Record a violation, once per (invariant, `once` or the message): one per checkpoint,
        not one per object of it."""
        assert invariant in INVARIANTS, invariant
        if (invariant, once or message) in self._seen:
            return
        self._seen.add((invariant, once or message))
        actor = self.world.sched.current
        who = by if by is not None else (actor.name if actor else "-")
        self.violations.append(Violation(invariant, message, self.world.sched.now if at is None else at, who))
        if at is None:
            self.world.sched.note(f"VIOLATION {invariant}: {message}")

    @property
    def lineage(self) -> str:
        return f"{self.active}@{self.max_epoch}"

    def before(self, epoch: int) -> str:
        """The lineage that was active just before `epoch` began (the one it took over)."""
        previous = next((f.active for f in self.fences if f.epoch == epoch - 1), "primary")
        return f"{previous}@{epoch - 1}"

    def off_chain(self, save: Save, lineage: str) -> bool:
        """Whether `save` is not on `lineage`'s chain: neither that lineage's own nor a
        checkpoint of an ancestor at or before the step the chain resumed from (a newer
        checkpoint of the lineage a failover left is a branch the job never continued)."""
        limit, seen = None, set()
        while lineage not in seen:
            seen.add(lineage)
            if save.lineage == lineage:
                return limit is not None and save.step > limit
            fork = self.forks.get(lineage)
            if fork is None:  # no job of it resumed anything yet: it goes on from the lineage it fenced
                epoch = int(lineage.rsplit("@", 1)[1])
                if epoch == 0:
                    return True
                lineage = self.before(epoch)
                continue
            lineage, step = fork
            limit = step if limit is None else min(limit, step)
        return True

    def own(self, run_id: str) -> str | None:
        """The lineage run `run_id`'s fence began (its re-run certifying that lineage's own
        checkpoint is a redo, judged as `restarted` when it starts a job from it)."""
        fence = next((f for f in self.fences if f.run_id == run_id), None)
        return f"{fence.active}@{fence.epoch}" if fence is not None else None

    def takes_over(self, run_id: str) -> str:
        """The lineage run `run_id` takes the job from: the one before its fence, or (not
        fenced yet) the active one."""
        fence = next((f for f in self.fences if f.run_id == run_id), None)
        return self.before(fence.epoch) if fence is not None else self.lineage

    @_hook
    def begin_save(self, actor: Actor, site: str, epoch: int, step: int, prefix: str) -> Save:
        save = Save(len(self.saves) + 1, actor.name, site, epoch, step, prefix)
        self.saves.append(save)
        return save

    @_hook
    def acted(self, what: str) -> None:
        """A control plane changed the world (a store write or delete that is not its lock or
        its clock probe, a compute launch, run or teardown): no other run's attempt that
        acted before may still be going (one failover or failback at a time)."""
        actor = self.world.sched.current
        run = getattr(actor, "run", None)
        if run is None:
            return
        for other, (process, since, first) in list(self.acting.items()):
            if other == run.run_id:
                continue
            if process.killed:
                del self.acting[other]
                continue
            self.violate(
                "two-acting",
                f"run {run.run_id} ({what}) acts while run {other}, acting since t={since:.2f}s "
                f"({first}), is still going",
                once=f"{run.run_id}:{other}",
            )
        if run.run_id not in self.acting or self.acting[run.run_id][0] is not actor.process:
            self.acting[run.run_id] = (actor.process, self.world.sched.now, what)

    @_hook
    def done_acting(self, run_id: str) -> None:
        """An attempt of `run_id` stopped acting (it is about to give its lock back)."""
        self.acting.pop(run_id, None)

    @_hook
    def landed(self, role: str, key: str, old: bytes | None, new: bytes | None) -> None:
        """A write (`new`) or delete (`new` None) landed on `role`'s store over `old`."""
        actor = self.world.sched.current
        if key not in (LOCK_KEY, REPLICATION_LOCK_KEY, CLOCK_KEY) and not key.startswith(CHAIN_PREFIX + "/"):
            self.acted(f"{'wrote' if new is not None else 'deleted'} {role}:{key}")
        if key == LEASE_KEY:
            if new is not None:
                self._lease(role, new, actor)
            return
        mine = getattr(actor, "save", None) if actor is not None and actor.kind in TRAINERS else None
        if mine is not None and new is not None and key.startswith(mine.prefix + "/"):
            rel = key[len(mine.prefix) + 1 :]
            mine.keys[rel] = new
            self.by_bytes[new] = mine
            mine.manifest |= rel == MANIFEST_NAME
            mine.marker_landed |= rel == COMMIT_MARKER
        written = self.by_bytes.get(new) if new is not None else None
        before = self.by_bytes.get(old) if old is not None else None
        own = actor is not None and actor.kind in TRAINERS
        who = f"{actor.name} ({actor.phase})" if actor else "set-up"
        if written is not None and not own and written.counted is False and role != written.site:
            self.violate(
                "fenced-out-copied",
                f"{written.describe()} copied to the {role} store by {who} ({key} first)",
                once=f"{role}:{written.id}",
            )
        if before is None or written is before:
            return
        trainer_of_lineage = own and getattr(actor, "lineage", None) == before.lineage
        if (
            before.counted
            and role == self.active
            and before.lineage == self.lineage
            and not trainer_of_lineage
        ):
            what = "deleted" if new is None else "overwritten"
            by = f" with {written.describe()}" if written is not None else ""
            self.violate(
                "active-overwritten",
                f"the active lineage's {before.describe()} on the {role} store {what}{by} by {who} ({key} first)",
                once=f"{role}:{before.id}:{what}",
            )
        mine_run = getattr(getattr(actor, "run", None), "run_id", None)
        loaded = not key.endswith("/" + COMMIT_MARKER)  # what a job loads: the manifest and shards
        if (
            loaded
            and not own
            and (role, before.prefix) in self.in_use
            and self.in_use[(role, before.prefix)] != mine_run
            and self._knows(actor, self.in_use[(role, before.prefix)])
        ):
            run = self.in_use[(role, before.prefix)]
            self._in_use_lost.append(
                (
                    run,
                    self.world.sched.now,
                    actor.name if actor else "-",
                    f"{before.describe()}, which failover run {run} resumes from, "
                    f"{'deleted' if new is None else 'overwritten'} by {who} ({key} first)",
                )
            )
        if new is None and actor is not None and actor.phase == "retention":
            self._retention_delete(role, key, old, before)

    def _knows(self, actor: Actor | None, run_id: str) -> bool:
        """Whether `actor` can know what run `run_id` resumes from: the run's ledger is where
        it reads (the same machine's file, or the ledger chain in the stores). A replicator on
        another worker with only local ledger files cannot (`lifeboat validate` warns: set
        LIFEBOAT_LEDGER_CHAIN=sites), so its deletion is that deployment's, not a bug."""
        run = self.world.runs.get(run_id)
        return self.world.ledger == "chain" or actor is None or run is None or actor.machine == run.machine

    def _lease(self, role: str, body: bytes, actor: Actor | None) -> None:
        lease = Lease.from_json(body)
        if lease.epoch > self.max_epoch:
            previous = self.active
            earlier = [f for f in self.fences if f.run_id == lease.run_id]
            if earlier:
                self.violate(
                    "second-fence",
                    f"run {lease.run_id} fenced again (epoch {lease.epoch}; it took epoch {earlier[0].epoch})",
                )
            if lease.active == previous:
                self.violate(
                    "self-fenced",
                    f"run {lease.run_id} took epoch {lease.epoch} for the {lease.active}, which was already "
                    f"active (epoch {self.max_epoch}): it fenced out the lineage {previous}@{self.max_epoch}",
                )
            self.fences.append(Fence(lease.epoch, lease.active, lease.run_id, self.world.sched.now))
            self.max_epoch, self.active = lease.epoch, lease.active
            self.world.fenced()
            return
        save = getattr(actor, "save", None) if actor is not None and actor.kind in TRAINERS else None
        if save is not None and actor.phase == "commit" and lease.epoch == save.epoch:
            save.counted = lease.epoch == self.max_epoch
            save.committed_at = self.world.sched.now

    # -- what a directory holds --------------------------------------------------------------
    def judge(self, objects: dict[str, bytes], prefix: str) -> tuple[Save | None, str]:
        """The save a directory holds whole, or None and why not."""
        found = {
            k[len(prefix) + 1 :]: v
            for k, v in objects.items()
            if k.startswith(prefix + "/") and not k.endswith("/" + RECEIPT_NAME)
        }
        if not found:
            return None, "gone"
        owners = {id(s): s for s in (self.by_bytes.get(v) for v in found.values()) if s is not None}
        if len(owners) != 1 or any(self.by_bytes.get(v) is None for v in found.values()):
            parts = ", ".join(sorted(s.describe() for s in owners.values())) or "unknown bytes"
            return None, f"a hybrid of {parts}"
        save = next(iter(owners.values()))
        if save.counted is not True:
            return None, save.describe()
        missing = [rel for rel, data in save.keys.items() if found.get(rel) != data]
        if missing or not save.manifest:
            return None, f"partial: {save.describe()} lacks {', '.join(sorted(missing)) or MANIFEST_NAME}"
        return save, ""

    def good(self, objects: dict[str, bytes]) -> list[Save]:
        """The whole, counted checkpoints among `objects`, newest step first."""
        dirs = sorted({k.split("/", 1)[0] for k in objects if "/" in k and k.startswith("step-")})
        good = [s for s in (self.judge(objects, d)[0] for d in dirs) if s is not None]
        return sorted(good, key=lambda s: s.step, reverse=True)

    def _retention_delete(self, role: str, key: str, old: bytes, before: Save | None) -> None:
        after = self.world.inner(role).snapshot()
        prior = dict(after) | {key: old}
        was, now = self.good(prior), self.good(after)
        if was and before is was[0] and was[0] not in now:
            self.violate(
                "newest-deleted",
                f"retention deleted the newest certifiable checkpoint on the {role} store, "
                f"{before.describe()} ({key} first)",
                once=f"{role}:{before.id}",
            )
        if was and not now:
            self.violate(
                "none-certifiable",
                f"retention left no certifiable checkpoint on the {role} store (deleting {key})",
                once=role,
            )

    # -- the failover's own checks -------------------------------------------------------------
    @_hook
    def certified(self, run_id: str, uri: str, what: str) -> None:
        role, prefix = self.world.locate(uri)
        save, why = self.judge(self.world.inner(role).snapshot(prefix + "/"), prefix)
        self.in_use = {k: v for k, v in self.in_use.items() if v != run_id}  # it resumes from this one now
        if save is None and why.startswith("partial") and why.endswith(f"lacks {COMMIT_MARKER}"):
            save = self._whole_but_marker(role, prefix)  # retention's first deletion: the data is whole
        if save is None and (why == "gone" or why.startswith("partial")):
            # whole when certification read it, deleted under it since: by another actor, so
            # judged as a deletion of a checkpoint in use (if this run goes on to fence)
            self._in_use_lost.append(
                (
                    run_id,
                    self.world.sched.now,
                    "-",
                    f"{uri}, which failover run {run_id} certified, was "
                    f"{'deleted' if why == 'gone' else 'partly deleted'} while it certified it ({why})",
                )
            )
            return
        if save is None:
            self.violate("certified-bad", f"run {run_id} {what} {uri}: {why}")
            return
        if save.lineage != self.own(run_id) and self.off_chain(save, self.takes_over(run_id)):
            self.violate(
                "certified-bad",
                f"run {run_id} {what} {uri}: {save.describe()}, off the chain of {self.takes_over(run_id)} "
                "(a branch it never continued)",
            )
        self.in_use[(role, prefix)] = run_id

    def _whole_but_marker(self, role: str, prefix: str) -> Save | None:
        objects = self.world.inner(role).snapshot(prefix + "/")
        found = {k[len(prefix) + 1 :]: v for k, v in objects.items()}
        owners = {id(s): s for s in (self.by_bytes.get(v) for v in found.values()) if s is not None}
        save = next(iter(owners.values())) if len(owners) == 1 else None
        if save is None or not save.counted or not save.manifest:
            return None
        whole = all(found.get(rel) == data for rel, data in save.keys.items() if rel != COMMIT_MARKER)
        return save if whole else None

    @_hook
    def loaded(self, job, role: str, prefix: str, read: dict[str, bytes]) -> None:
        owners = {id(s): s for s in (self.by_bytes.get(v) for v in read.values()) if s is not None}
        uri = f"{self.world.inner(role).uri}/{prefix}"
        save = next(iter(owners.values())) if len(owners) == 1 else None
        if save is None or any(self.by_bytes.get(v) is None for v in read.values()):
            parts = ", ".join(sorted(s.describe() for s in owners.values())) or "unknown bytes"
            self.violate("resumed-bad", f"the job of run {job.run_id} loaded {uri}: a hybrid of {parts}")
        elif save.counted is not True:
            self.violate("resumed-bad", f"the job of run {job.run_id} loaded {uri}: {save.describe()}")
        elif {r for r in save.keys if r != MANIFEST_NAME} - set(read):
            self.violate(
                "resumed-bad", f"the job of run {job.run_id} loaded {uri}: partial {save.describe()}"
            )
        elif (
            job.run_id is not None
            and save.lineage != job.lineage
            and self.off_chain(save, self.before(job.epoch))
        ):
            self.violate(
                "resumed-bad",
                f"the job of run {job.run_id} loaded {uri}: {save.describe()}, off the chain of "
                f"{self.before(job.epoch)} (a branch it never continued)",
            )
        if save is not None and job.run_id is not None and save.lineage != job.lineage:
            self.forks[job.lineage] = (save.lineage, save.step)  # its own checkpoint: no new fork
        self.in_use = {k: v for k, v in self.in_use.items() if v != job.run_id}
        if save is not None and job.run_id is not None:
            self.resumed_from[job.run_id] = save

    @_hook
    def attempt_killed(self, run_id: str, entry) -> None:
        """An attempt of `run_id` was killed: what it certified stays in use only if its ledger
        entry names it, in progress (retention keeps what such an entry names, and the re-run
        takes it from there; an entry that says the run ended protects nothing, and its re-run
        certifies anew when the checkpoint is gone)."""
        named = (
            entry.checkpoint
            if entry is not None and "certify" in entry.done and entry.outcome == "in-progress"
            else None
        )
        self.in_use = {
            k: v
            for k, v in self.in_use.items()
            if v != run_id or (named and named.rstrip("/").endswith("/" + k[1]))
        }

    @_hook
    def run_ended(self, run_id: str) -> None:
        self.in_use = {k: v for k, v in self.in_use.items() if v != run_id}

    @_hook
    def job_started(self, job, jobs: list) -> None:
        if job.checkpoint and job.run_id is not None:  # the fork it means to take (loaded or not)
            role, prefix = self.world.locate(job.checkpoint)
            save, _ = self.judge(self.world.inner(role).snapshot(prefix + "/"), prefix)
            if save is not None and save.lineage != job.lineage:
                self.forks[job.lineage] = (save.lineage, save.step)
        for other in jobs:
            if (
                other is not job
                and other.run_id == job.run_id
                and other.attempt != job.attempt
                and other.rc is None
                and not _older(job.checkpoint, other.checkpoint)  # a rollback resumes anew from older
            ):
                self.violate(
                    "restarted",
                    f"attempt {job.attempt} of run {job.run_id} started a job from {job.checkpoint} while "
                    f"attempt {other.attempt}'s job from {other.checkpoint} runs",
                )

    @_hook
    def proved(self, run_id: str, attempt: int | None) -> None:
        """An attempt of `run_id` proved loss parity on the job it runs (kept or started)."""
        self._proved.add((run_id, attempt))

    @_hook
    def torn_down(self, job, run_id: str | None, attempt: int | None) -> None:
        if job.rc is not None or run_id is None or job.run_id != run_id or attempt == job.attempt:
            return
        if (run_id, attempt) in self._proved:  # it kept the job and judged it: the proof's policy
            return
        if job.lineage == self.lineage:
            self.violate(
                "torn-down",
                f"attempt {attempt} of run {run_id} tore down the healthy job its attempt {job.attempt} "
                f"started ({job.lineage}, from {job.checkpoint})",
            )

    # -- after the history -----------------------------------------------------------------------
    def finish(self) -> None:
        world = self.world
        fenced = {f.run_id for f in self.fences}
        for run, at, by, message in self._in_use_lost:  # harm only if that run took the job
            if run in fenced:
                self.violate("in-use-deleted", message, at=at, by=by, once=message.split(" (")[0])
        if world.sched.hung:
            self.violate("hung", f"every live actor waited forever: {', '.join(world.sched.hung)}")
        for actor in world.sched.actors:
            error = actor.error
            if error is None:
                continue
            if actor.kind in TRAINERS:
                save = getattr(actor, "save", None)
                if actor.phase == "commit" and save is not None and save.marker_landed:
                    self.violate(
                        "commit-landed-stopped",
                        f"{actor.name} stopped on {type(error).__name__}: {error} though its commit of "
                        f"{save.prefix} landed",
                    )
            elif not isinstance(error, LifeboatError):
                line = str(error).splitlines()[0] if str(error) else ""
                self.violate(
                    "bare-error", f"{actor.name} ({actor.phase}) died of {type(error).__name__}: {line}"
                )
        self._ledgers()

    def _rpo(self, run, entry, fenced: list[Fence]) -> None:
        """The ledger's RPO (outage start, or a failback's fence, minus the resumed checkpoint's
        write time) may not come out negative where the run truly lost work: by the true
        times of the outage (or the fence) and of the checkpoint's commit."""
        failback = entry.kind == "failback"
        start = entry.phases.get("fenced" if failback else "outage_start")
        written = entry.checkpoint_written_at
        save = self.resumed_from.get(run.run_id)
        if start is None or written is None or save is None or save.committed_at is None:
            return
        true_start = fenced[0].at if failback and fenced else self.world.outage_at
        lost = true_start - save.committed_at
        recorded = (start - written).total_seconds()
        if recorded < 0 and lost > 2.0 and entry.rpo is not None:  # unknown (None) says so
            self.violate(
                "ledger-negative-rpo",
                f"run {run.run_id}: RPO {recorded:.1f}s (checkpoint written {written:%H:%M:%S}, after the "
                f"{'fence' if failback else 'outage'} at {start:%H:%M:%S} by the clocks that stamped them); "
                f"the run lost {lost:.1f}s of work, the ledger reports {entry.rpo}",
            )

    def _ledgers(self) -> None:
        world = self.world
        for run in world.runs.values():
            if not run.finished or run.run_id in world.unwritten:
                continue  # unfinished, or its last write refused (a full disk: the run said so, in one line)
            entry = world.ledger_entry(run)
            if entry is None:
                continue
            fenced = [f for f in self.fences if f.run_id == run.run_id]
            self._rpo(run, entry, fenced)
            says = "fenced" in entry.phases or "fence" in entry.notes
            if fenced and not says:
                self.violate(
                    "ledger-missed",
                    f"run {run.run_id} took epoch {fenced[0].epoch}; its ledger ({entry.outcome}) does not say so",
                )
            if says and not fenced:
                self.violate(
                    "ledger-invented", f"run {run.run_id}'s ledger records a fence that never landed"
                )
            jobs = [j for j in world.jobs if j.run_id == run.run_id]
            # a rollback chose an older checkpoint, and the run failed before a job ran from it
            chose_anew = "rollback" in entry.notes and entry.outcome != "completed"
            if jobs and entry.checkpoint != jobs[-1].checkpoint and not chose_anew:
                self.violate(
                    "ledger-checkpoint",
                    f"run {run.run_id}'s ledger names {entry.checkpoint}; its job resumed from {jobs[-1].checkpoint}",
                )
            if entry.outcome == "completed" and not jobs:
                self.violate("ledger-invented", f"run {run.run_id} completed without starting a job")
