"""The walker: runs the step graph over `FailoverSteps`, keeping the ledger as it goes.

Pure: no Prefect. A `Runner` decides how a step call runs — `ThreadRunner` here (threads,
retries on `ProviderUnavailable`), Prefect task runs in `flows/failover.py` — and the walker
starts each step as soon as the steps it waits for (`graph.step_graph`) are done. The
approval gate runs on the walker's own thread (a Prefect pause must), while started steps
(early provisioning) go on. Before each step that acts the steps re-check that the job is
still this run's (`FailoverSteps.recheck`); a run that is not stands down (`StandDown`):
outcome `stood-down`, the reason in the ledger, and the (shared) cluster left alone. After each
proof the rollback policy (`rollback.after_proof`) decides: done (passed, or not provable and
said so), page with the job going on (a mismatch in the replay beside it), roll back to an
older certified checkpoint (resume and prove again), or stop.

Each step's result is handed to the ledger before the steps after it start, and a step that
acts waits for every record so far to land (`RtoLedger.flush`) before it acts: whatever the
world holds of this run, its ledger entry holds the decisions it rests on. A re-run under the
same run id walks from that entry (`lifeboat_dr.core.failover.rerun`): the steps it holds done
are done (the chosen checkpoint, the approval, the resume, a passed proof), the others run
again, idempotently where they act.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from lifeboat_dr.core.certify import CertifyReport
from lifeboat_dr.core.failover import graph, rerun
from lifeboat_dr.core.failover.card import approval_card, asked
from lifeboat_dr.core.failover.contract import FailoverSettings, FailoverSteps, Gate, Provisioned
from lifeboat_dr.core.failover.rollback import ParityDecision, after_proof
from lifeboat_dr.core.ledger import LedgerEntry, ParityRecord, RtoLedger
from lifeboat_dr.core.resume import ParityOutcome
from lifeboat_dr.kernel.errors import ProviderUnavailable, StandDown, StopFailover, WriteFailed

ACTING = ("fence", "provision", "resume")  # steps that change the world: re-checked first


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Timed:
    value: Any
    started: datetime
    finished: datetime


def timed(call: Callable[..., Any], *args: Any) -> Timed:
    """Run one step call, noting when it started and ended."""
    started = _now()
    value = call(*args)
    return Timed(value, started, _now())


class Runner(Protocol):
    """How a step call runs: `start` returns a handle whose `.future` (a
    `concurrent.futures.Future`) is done once the step has ended, retries spent."""

    def start(self, name: str, call: Callable[..., Any], *args: Any) -> Any: ...

    def result(self, handle: Any) -> Timed:
        """The step's `Timed` (re-raising its error); called once the future is done."""
        ...


class ThreadRunner:
    """Steps on threads, each retried on `ProviderUnavailable` up to `retries` times."""

    def __init__(self, retries: int, retry_delay_s: float, workers: int = 8):
        self.retries, self.retry_delay_s = retries, retry_delay_s
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="failover-step")

    def start(self, name: str, call: Callable[..., Any], *args: Any):
        return _Handle(self.pool.submit(self._retrying, call, *args))

    def _retrying(self, call, *args) -> Timed:
        for attempt in range(self.retries + 1):
            try:
                return timed(call, *args)
            except ProviderUnavailable:
                if attempt == self.retries:
                    raise
                time.sleep(self.retry_delay_s)
        raise AssertionError("unreachable")

    def result(self, handle) -> Timed:
        return handle.future.result()


@dataclass
class _Handle:
    future: concurrent.futures.Future


def run_step(runner: Runner, name: str, call: Callable[..., Any], *args: Any, timeout_s: float) -> Timed:
    """Run one step alone and wait for it, at most `timeout_s` from its start (a chain of
    steps, like the serving table, needs no more than this)."""
    handle = runner.start(name, call, *args)
    done, _ = concurrent.futures.wait([handle.future], timeout=timeout_s)
    if not done:
        raise StopFailover(f"step {name} ran past {timeout_s:g}s")
    return runner.result(handle)


def _checked(checks: tuple[Callable[[], None], ...], act: Callable[..., Any], *args: Any) -> Any:
    """Run the checks, then act: they are the acting step's first part (timed with it,
    retried with it), never a gap before it."""
    for check in checks:
        check()
    return act(*args)


class _Walk:
    """One failover run's state while the walker goes through the graph."""

    def __init__(self, settings, steps, ledger, gate, runner, run_id, drill, clock):
        self.s, self.steps, self.ledger, self.gate, self.runner = settings, steps, ledger, gate, runner
        self.run_id, self.drill, self.clock = run_id, drill, clock
        self.graph = graph.step_graph(settings.provision_before_approval)
        self.done: dict[str, Timed] = {}
        self.running: dict[str, tuple[Any, float]] = {}  # step -> (handle, monotonic start)
        self.announce = False  # the gate's announcement of a decision waits for the next step
        self.checkpoint: CertifyReport | None = None
        # a re-run: the steps an earlier attempt of this run finished (step -> result), and
        # its resume attempts (a rollback is the second)
        self.found = rerun.found_done(ledger.prior)
        self.attempt = ledger.prior.attempt if ledger.prior else 1
        self.fence_started = False  # its lease may have landed even if the step fails

    # -- what each step is called with, and what it leaves in the ledger -------------------
    def args(self, name: str) -> tuple:
        if name == "provision":
            return (self.done["plan"].value,)
        if name in ("resume", "prove"):
            return (self.done["provision"].value, self.checkpoint)
        if name == "fence":
            return (self.checkpoint,)
        return ()

    def record(self, name: str, t: Timed) -> None:
        led, again = self.ledger, self.attempt > 1
        v = t.value
        if name == "confirm":
            led.mark("outage_start", v.outage_started_at)
            led.mark("detected", v.detected_at)
        step = graph.BY_NAME[name]
        if not again:
            led.begin(step.milestone, t.started)
        if name == "fence":
            stopped = (
                "primary job stopped"
                if v.primary_stopped
                else "primary job not stopped (unnamed or unreachable)"
            )
            led.note("fence", f"epoch {v.epoch} on {', '.join(v.stores)}; {stopped}")
            if v.checkpoint is not None:
                c = v.checkpoint.certified
                led.checkpoint(c.uri, c.written_at, c.step)
            if v.note:
                led.note("handover", v.note)
        elif name == "certify":
            led.checkpoint(v.certified.uri, v.certified.written_at, v.certified.step)
            rejected = [f"step {r.step}: {r.reason} — {r.detail}" for r in v.rejected]
            led.note("certification", "; ".join([f"mode {v.mode}", *rejected]))
            if v.clocks:
                led.note("clocks", v.clocks)
        elif name == "plan":
            if v and v[0].price_source:
                led.note("plan prices", v[0].price_source)
        elif name == "provision":
            led.note("cluster", f"{v.cluster} on {v.option.describe()}")
            led.note("provision attempts", "; ".join(v.attempts))
        elif name == "resume":
            led.mark("checkpoint_loaded", v.checkpoint_loaded_at, again=again)
            led.mark("first_step", v.first_step_at, again=again)  # RTO: to the step that stays
            kept = ", kept by a re-run (not restarted)" if v.kept else ""
            where = self.done["provision"].value.cluster
            led.note(
                "job", f"{v.job or 'the job'} on {where}, from step {self.checkpoint.certified.step}{kept}"
            )
            led.step_done(name)
            return
        elif name == "prove":
            led.note("parity", v.summary())
            led.parity(
                ParityRecord(
                    outcome=v.outcome.value,
                    compared=v.compared,
                    asked=v.asked,
                    checkpoint_step=self.checkpoint.certified.step,
                    replayed_from=v.replayed_from,
                    detail=v.detail,
                )
            )
            if v.outcome is ParityOutcome.not_provable:  # final, and never the parity_passed milestone
                led.step_done(name)
            if not v.passed:
                return
        led.mark(step.milestone, t.finished)
        led.step_done(name)

    # -- the walk -----------------------------------------------------------------------
    def ready(self) -> list[str]:
        """Steps whose inputs are all there, the approval gate last (it blocks this thread)."""
        ready = [
            n
            for n, deps in self.graph.items()
            if n not in self.done and n not in self.running and all(d in self.done for d in deps)
        ]
        return sorted(ready, key=lambda n: n == "approval")

    def run(self) -> LedgerEntry:
        self.done["detect"] = Timed(None, self.clock(), self.clock())  # detection happened before the run
        if self.ledger.prior is not None:
            self.ledger.note("re-run found done", rerun.summary(self.found))
        while "prove" not in self.done:
            ready = self.ready()
            self.start_all([n for n in ready if n != "approval"])
            if "approval" in ready:
                if not self.approve():
                    return self.ledger.finish("aborted")
                continue  # the fence starts now, not after a step still running (early provisioning)
            if self.running:
                self.collect()
        return self.ledger.finish("completed")

    def found_done(self, name: str) -> bool:
        """Done from the record when an earlier attempt of this run finished it: its result
        stands and it does not run again."""
        if name not in self.found:
            return False
        if name == "certify" and not self.steps.still_there(self.found["certify"]):
            # the earlier attempt ended (failed, aborted) and retention took its checkpoint
            # meanwhile: choose anew, and what rested on the old choice is not done either
            gone = self.found["certify"].certified.uri
            for step in ("certify", "resume", "prove"):
                self.found.pop(step, None)
            self.ledger.note("re-run", f"{gone}, chosen before the re-run, is gone: certified anew")
            return False
        at = self.clock()
        self.done[name] = Timed(self.found.pop(name), at, at)
        if name == "certify":
            self.checkpoint = self.done[name].value
        return True

    def start_all(self, names: list[str]) -> None:
        for name in names:
            if self.found_done(name):
                continue
            call = getattr(self.steps, name)
            self.fence_started |= name == "fence"
            if name in ACTING:
                # every record so far landed (a re-run reads what this acts on), and the job
                # still this run's
                checks = (self.ledger.flush, partial(self.steps.recheck, name))
                call = partial(_checked, checks, call)
            self.running[name] = (self.runner.start(name, call, *self.args(name)), time.monotonic())
        if self.announce and names:
            self.announce = False
            self.gate.announce()

    def collect(self) -> None:
        """Wait for the first running step to end (or one to outlive the step timeout)."""
        limit = self.s.step_timeout_s
        oldest = min(start for _, start in self.running.values())
        wait = max(0.0, oldest + limit - time.monotonic())
        futures = {h.future: n for n, (h, _) in self.running.items()}
        finished, _ = concurrent.futures.wait(futures, timeout=wait, return_when="FIRST_COMPLETED")
        if not finished:
            late = next(n for n, (_, start) in self.running.items() if start == oldest)
            raise StopFailover(f"step {late} ran past {limit:g}s")
        names = sorted((futures[f] for f in finished), key=list(self.graph).index)
        for name in names:
            handle, _ = self.running.pop(name)
            self.done[name] = self.runner.result(handle)
            if name == "certify":
                self.checkpoint = self.done[name].value
            elif name == "fence" and self.done[name].value.checkpoint is not None:
                self.checkpoint = self.done[name].value.checkpoint  # a failback's handover
        # Recorded before the next steps start, written behind (a writer thread, `execute`):
        # a step that only reads goes on while it is written, one that acts waits for it.
        for name in names:
            with self.ledger.batch():
                self.record(name, self.done[name])
        self.start_all([n for n in self.ready() if n != "approval" and "prove" not in self.done])
        if "prove" in names:
            self.after_proof(self.done["prove"].value)

    def approve(self) -> bool:
        """Ask the gate (unless an earlier attempt of this run was granted it). The ledger is
        flushed first: a person is never asked to approve a failover whose ledger cannot
        record it (a write behind that failed raises its `WriteFailed` here, before any card
        is posted)."""
        if self.found_done("approval"):
            return True
        self.ledger.flush()
        card = approval_card(
            self.s,
            self.run_id,
            self.drill,
            self.done["confirm"].value,
            self.checkpoint,
            self.done["plan"].value,
            self.done["prestage"].value,
            self.clock(),
            proof=self.steps.plan_proof(self.checkpoint),  # what it resumes from, how it will prove it
        )
        card.action, card.epoch = asked(self.steps)  # the question the person's signature answers
        started = self.clock()
        decision = self.gate.request(card, self.ledger)
        if not decision.approved:
            self.gate.announce()
            self.give_back_early_cluster()
            return False
        self.done["approval"] = Timed(decision, started, self.clock())
        self.ledger.step_done("approval")
        self.announce = True  # once the fence has begun
        return True

    def after_proof(self, parity) -> None:
        decision = after_proof(parity, self.attempt, self.s.on_parity_failure)
        if decision is ParityDecision.passed:
            return
        uri = self.checkpoint.certified.uri
        if decision in (ParityDecision.unproven, ParityDecision.page):
            what = "NOT PROVABLE" if decision is ParityDecision.unproven else "MISMATCH in the replay"
            self.gate.notify(
                f"Lifeboat: loss parity {what} for {self.s.runbook} from {uri}: {parity.detail}. "
                f"The job trains on from step {self.checkpoint.certified.step}."
            )
            return
        if decision is ParityDecision.stop:
            self.gate.notify(f"Lifeboat: loss parity failed for {self.s.runbook} from {uri}: {parity.detail}")
            raise StopFailover(f"loss parity failed from {uri}: {parity.detail}")
        failed_step = self.checkpoint.certified.step
        older = run_step(
            self.runner, "certify", self.steps.certify, failed_step, timeout_s=self.s.step_timeout_s
        ).value
        self.ledger.note(
            "rollback",
            f"parity failed from step {failed_step} ({parity.detail}); rolled back to step {older.certified.step}",
        )
        self.checkpoint = older
        self.attempt += 1
        with self.ledger.batch():
            self.ledger.checkpoint(older.certified.uri, older.certified.written_at, older.certified.step)
            self.ledger.again(self.attempt, "resume", "prove")
        del self.done["resume"], self.done["prove"]

    def fence_landed(self, error: BaseException) -> None:
        """The walk failed after its fence step started (or in a re-run): see `fence_read_back`."""
        if self.fence_started or self.ledger.prior is not None:
            fence_read_back(self.steps, self.ledger, f"the run failed ({error})")

    def inherited(self, cluster: Provisioned) -> bool:
        """Whether an earlier attempt of this run provisioned `cluster` (its entry holds the
        provision done) and this one has not started a job there: a re-run that fails must not
        tear down the job that attempt may have resumed (the only one training now)."""
        prior = self.ledger.prior
        return prior is not None and "provision" in prior.done and "resume" not in self.done

    def cluster(self) -> Provisioned | None:
        """The cluster provisioned so far, also one still being provisioned when asked."""
        if "provision" in self.done:
            return self.done["provision"].value
        if "provision" in self.running:
            handle, _ = self.running.pop("provision")
            try:
                return self.runner.result(handle).value
            except BaseException:
                return None
        return None

    def give_back_early_cluster(self) -> None:
        if (cluster := self.cluster()) is not None:
            self.steps.teardown(cluster)  # provisioned while waiting: cheap to give back
            self.done.pop("provision", None)


def fence_read_back(steps: FailoverSteps, ledger: RtoLedger, why: str) -> None:
    """A run that stops without having recorded its fence (its fence step failed after the
    write, the write's answer was lost, an earlier attempt was killed before its record, a
    re-run stood down): its lease may have landed all the same. Read back, it is recorded in
    a note: the ledger holds every action taken."""
    if "fenced" in ledger.entry.phases or "fence" in ledger.entry.notes:
        return
    landed = steps.fence_read_back()
    if landed is not None:
        ledger.note("fence", f"{landed}: the lease landed, though {why}")


def execute(
    settings: FailoverSettings,
    steps: FailoverSteps,
    ledger: RtoLedger,
    gate: Gate,
    *,
    run_id: str,
    drill: bool = False,
    keep_cluster: bool = False,
    runner: Runner | None = None,
    clock: Callable[[], datetime] = _now,
) -> LedgerEntry:
    """Walk the step graph; every milestone lands in `ledger`. On failure the ledger names the
    milestone the run was heading for, the humans are told, and any cluster is torn down;
    drills tear theirs down when they complete too, unless `keep_cluster` (the failback
    drill fails back from that cluster's job; the drill tears it down after)."""
    runner = runner or ThreadRunner(settings.retries, settings.retry_delay_s)
    walk = _Walk(settings, steps, ledger, gate, runner, run_id, drill, clock)
    try:
        with ledger.writing_behind():  # durable writes off the walker's path; flushed at the end
            return walk.run()
    except StandDown as e:
        # The cluster's name is the runbook's: what this run provisioned is the other run's
        # cluster too, so it is left alone.
        if ledger.prior is not None:
            fence_read_back(steps, ledger, "this re-run stood down")
        ledger.note("stood down", str(e))
        walk.done.pop("provision", None)
        walk.running.pop("provision", None)
        return ledger.finish("stood-down")
    except BaseException as e:
        with suppress(WriteFailed):  # an unwritable ledger: its own error is what we raise
            walk.fence_landed(e)
        heading = next((m for m in graph.MILESTONES if m not in ledger.entry.phases), graph.MILESTONES[-1])
        with suppress(WriteFailed):
            ledger.fail(heading, e)
        gate.notify(f"Lifeboat {asked(steps)[0]} of {settings.runbook} failed before {heading}: {e}")
        if (cluster := walk.cluster()) is not None and walk.inherited(cluster):
            with suppress(WriteFailed):
                ledger.note(
                    "cluster",
                    f"{cluster.cluster} left as an earlier attempt of this run left it: its job may be "
                    "the recovered one (tear it down by hand if it is not running)",
                )
        elif cluster is not None:
            steps.teardown(cluster)
            walk.done.pop("provision", None)
            with suppress(WriteFailed):  # a run retried after this finds no job to keep
                ledger.again(walk.attempt, "provision", "resume", "prove")
        raise
    finally:
        gate.announce()  # a decision's announcement not yet out (the walk ended before the next step)
        if drill and not keep_cluster and (cluster := walk.cluster()) is not None:
            steps.teardown(cluster)
