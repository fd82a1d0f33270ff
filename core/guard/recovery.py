"""Walking the recovery ladder: each rung a step with its own ledger entry, one entry for the
whole ladder naming the rung that recovered.

    fault event ─► rungs_for(policy, fault) ─► rung 1 ─(failed)─► rung 2 ─► … ─► failover
                                                 │completed
                                                 └─► the ladder's entry: recovered_by = rung 1

Ledger entries (`lifeboat_dr.core.ledger`), run ids from the fault event's id:
`recovery-<event id>` (kind `recovery`) for the whole ladder and `recovery-<event id>.<rung>`
(kind: the rung) for each rung but failover, whose entry is the failover flow's own. A rung
entry's phases: outage_start (the fault), detected, approval_requested / approval_granted
(`approval: wait`), provisioned (the rung's action issued), first_step (the job healthy); its
RTO is outage start to healthy, against the rung's own target.

Twice: a ladder whose entry has ended is not walked again (the same event delivered twice).
Half-done: a re-run under the same event id reads each rung's entry: an ended rung keeps its
outcome (a completed one is never repeated), a rung whose action was issued (`provisioned`)
only waits for health again, any other starts over. Concurrent deliveries of one event are
not serialised here: nothing holds a lock across the walk.
Forged or stale: a rung acts only on a job seen stopped (`ComputeRungs`, `JobRunning`): a
live job's rung stands down and the ladder stops there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from lifeboat_dr.core.guard.ladder import ENDED, FaultSeen, next_rung, rungs_for
from lifeboat_dr.core.ledger import LedgerEntry, RtoLedger
from lifeboat_dr.core.resume import wait_first_step
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError
from lifeboat_dr.providers.compute.base import Compute, JobSpec, JobState, JobTimeout, PlanOption, wait_for
from lifeboat_dr.providers.compute.fallback import launch_with_fallback


class RungFailed(LifeboatError):
    """A rung's job did not become healthy (it failed again, or not in time)."""


class JobRunning(LifeboatError):
    """The job a rung was to recover runs on its cluster: the fault event is stale (a re-run
    after the recovery), duplicated or forged. Nothing is done to a live job."""


@dataclass(frozen=True)
class RungSetting:
    """One rung as the runbook sets it (`runbooks.model.Rung`), resolved."""

    name: str
    approval: str = "auto"  # auto | wait
    rto_target: timedelta = timedelta(minutes=30)
    zones: tuple[str, ...] = ()  # other-zone: cloud/region/zone infra strings, in order


_EVENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_:-]{0,99}")  # a Prefect event id is a UUID


def ladder_id(event_id: str) -> str:
    """The ladder's run id for a fault event; `ConfigError` for an id that could name another
    run or key (a ledger store keys entries by run id: no `/`, no `..`, no `.`)."""
    if not isinstance(event_id, str) or not _EVENT_ID.fullmatch(event_id):
        raise ConfigError(f"event id {str(event_id)[:40]!r}: letters, digits, _ : - only, at most 100")
    return f"recovery-{event_id}"


class Ledgers:
    """The ladder's entries in one sink (`LedgerFile` / `LedgerStore`)."""

    def __init__(self, runbook: str, sink, *, rto_target, rpo_target, drill=False, clock=None):
        self.runbook, self.sink, self.drill = runbook, sink, drill
        self.rto_target, self.rpo_target = rto_target, rpo_target
        self.clock = clock or (lambda: datetime.now(UTC))

    def read(self, run_id: str) -> LedgerEntry | None:
        return self.sink.entry(self.runbook, run_id)

    def open(self, run_id: str, kind: str, rto_target: timedelta | None = None) -> RtoLedger:
        return RtoLedger(
            self.runbook,
            run_id,
            rto_target=rto_target or self.rto_target,
            rpo_target=self.rpo_target,
            drill=self.drill,
            kind=kind,
            sink=self.sink,
            clock=self.clock,
            prior=self.read(run_id),
        )


class RungActions(Protocol):
    def act(self, rung: RungSetting, fault: FaultSeen) -> tuple[str, dict[str, str]]:
        """Issue the rung's action; (the cluster the job now runs on, notes for the ledger).
        Raises `LifeboatError` when it cannot."""
        ...

    def healthy(self, cluster: str, timeout_s: float) -> datetime:
        """When the job on `cluster` was seen healthy; `LifeboatError` when it is not in time."""
        ...


class ComputeRungs:
    """The rungs through the compute interface. `cluster`/`option`: where the job runs now;
    `checkpoint()`: the newest committed checkpoint (URI, step), None for a fresh start.
    Healthy: with `first_step`, a step with a finite loss in the job's log after the
    checkpoint's (`core.resume.wait_first_step`, as the failover's resume); without it (a
    fake, whose jobs log nothing), the job running or done."""

    def __init__(
        self,
        compute: Compute,
        cluster: str,
        option: PlanOption,
        job: JobSpec,
        checkpoint: Callable[[], tuple[str, int] | None],
        *,
        first_step: bool = False,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.compute, self.cluster, self.option, self.job = compute, cluster, option, job
        self.checkpoint, self.first_step, self.now = checkpoint, first_step, now
        self._timing = {k: v for k, v in (("clock", clock), ("sleep", sleep)) if v is not None}
        self._after = 0  # the step the job resumed from

    def act(self, rung: RungSetting, fault: FaultSeen) -> tuple[str, dict[str, str]]:
        self._ended()
        newest = self.checkpoint()
        job = self.job.resuming_from(newest[0] if newest else None)
        self._after = newest[1] if newest else 0
        notes = {"checkpoint": job.checkpoint or "none: a fresh start"}
        if rung.name == "restart":
            self.compute.run(self.cluster, job)  # replaces the stopped job on the same cluster
            return self.cluster, notes
        released = self._release(self.cluster, notes)
        if rung.name == "relaunch-without-node":
            if not released:  # a launch under the same name would find the failed cluster
                raise RungFailed(f"relaunch-without-node: {notes['teardown']}")
            notes["failed node"] = f"{fault.host or 'unknown'} (rank {fault.rank})"
            self.compute.launch(self.cluster, self.option, job)
            return self.cluster, notes
        if rung.name == "other-zone":
            options = [
                replace(self.option, infra=z, rank=i) for i, z in enumerate(rung.zones) if z != fault.zone
            ]
            if not options:
                raise RungFailed(f"other-zone: no zone but the failed one ({fault.zone})")
            name = self.cluster if released else f"{self.cluster}-zone"  # the failed zone kept its name
            result = launch_with_fallback(self.compute, name, options, job, **self._timing)
            notes["zone"] = result.cluster.option.infra
            return name, notes
        raise ValueError(f"ComputeRungs does not act the {rung.name} rung")

    def _ended(self, settle_s: float = 30.0) -> None:
        """`JobRunning` unless the job on the cluster has stopped: a faulted rank exits right
        after its event, so its job gets `settle_s` to be seen stopped. A cluster whose status
        cannot be read (its zone or provider out) is no live job to protect: the rung acts."""
        try:
            wait_for(
                self.compute,
                self.cluster,
                lambda s: s.job is not JobState.RUNNING,
                timeout=settle_s,
                **self._timing,
            )
        except JobTimeout:
            raise JobRunning(
                f"the job on {self.cluster} is running: a stale, repeated or forged fault event; nothing done"
            ) from None
        except LifeboatError:
            return

    def _release(self, cluster: str, notes: dict[str, str]) -> bool:
        """Tear the failed cluster down (its nodes released), said in `notes`; False when the
        provider refused (an outage may)."""
        try:
            self.compute.teardown(cluster)
        except LifeboatError as e:
            notes["teardown"] = f"{cluster} not torn down: {e}"
            return False
        notes["teardown"] = f"{cluster} torn down"
        return True

    def healthy(self, cluster: str, timeout_s: float) -> datetime:
        if self.first_step:
            return wait_first_step(
                lambda: self.compute.logs(cluster),
                self._after,
                timeout_s=timeout_s,
                job_alive=lambda: self.compute.status(cluster).job is JobState.RUNNING,
                **self._timing,
            ).at
        st = wait_for(
            self.compute,
            cluster,
            lambda s: s.job is JobState.RUNNING or s.job.finished,
            timeout=timeout_s,
            **self._timing,
        )
        if st.job is JobState.FAILED:
            raise RungFailed(f"{cluster}: the job failed again (exit {st.returncode})")
        return self.now()


@dataclass
class Walk:
    """One walk of the ladder for one fault event (see the module docstring)."""

    event_id: str
    fault: FaultSeen
    rungs: Sequence[RungSetting]
    actions: RungActions
    ledgers: Ledgers
    outage_start: datetime
    detected: datetime
    approve: Callable[[str, str], bool] = lambda rung, why: False  # (rung, what is asked) -> approved
    failover: Callable[[], tuple[str, str]] | None = None  # runs the failover: (its run id, outcome)

    def run(self) -> LedgerEntry:
        run_id = ladder_id(self.event_id)
        prior = self.ledgers.read(run_id)
        if prior is not None and prior.outcome != "in-progress":
            return prior  # this event's ladder was walked already
        whole = self.ledgers.open(run_id, "recovery")
        whole.mark("outage_start", self.outage_start)
        whole.mark("detected", self.detected)
        by_name = {r.name: r for r in self.rungs}
        plan = rungs_for([r.name for r in self.rungs], self.fault)
        whole.note("plan", " -> ".join(plan) or "none")
        if not plan:
            whole.fail("confirmed", f"no rung of the policy can help a {self.fault.scope} outage")
            return whole.finish("failed")
        outcomes = {r: self._ended(r, whole) for r in plan}
        while (rung := next_rung(plan, outcomes)) is not None:
            outcomes[rung] = self._failover(whole) if rung == "failover" else self._rung(by_name[rung])
            whole.note(f"rung {rung}", outcomes[rung])
        return self._finish(whole, plan, outcomes)

    def _ended(self, rung: str, whole: RtoLedger) -> str | None:
        if rung == "failover":
            return whole.entry.notes.get("rung failover")
        entry = self.ledgers.read(f"{whole.entry.run_id}.{rung}")
        return entry.outcome if entry is not None and entry.outcome in ENDED else None

    def _finish(self, whole: RtoLedger, plan: list[str], outcomes: dict) -> LedgerEntry:
        done = next((r for r in plan if outcomes.get(r) == "completed"), None)
        if done is None:
            stopped = next((r for r in plan if outcomes.get(r) in ("rejected", "stood-down")), None)
            outcome = outcomes[stopped] if stopped else "failed"
            why = {
                "failed": "every rung failed",
                "rejected": f"{stopped} rejected",
                "stood-down": f"{stopped} stood down: the job is running, nothing to recover",
            }[outcome]
            whole.fail("first_step", why, outcome=outcome)
            return whole.finish(outcome)
        whole.note("recovered_by", done)
        if done != "failover":
            healthy = self.ledgers.read(f"{whole.entry.run_id}.{done}").phases.get("first_step")
            whole.mark("first_step", healthy)
        return whole.finish("completed")

    def _rung(self, rung: RungSetting) -> str:
        led = self.ledgers.open(f"{ladder_id(self.event_id)}.{rung.name}", rung.name, rung.rto_target)
        phases = led.entry.phases
        led.mark("outage_start", self.outage_start)
        led.mark("detected", self.detected)
        if rung.approval == "wait" and "approval_granted" not in phases:
            led.mark("approval_requested")
            if not self.approve(rung.name, self._asked(rung)):
                led.fail("approval_granted", f"{rung.name} rejected", outcome="rejected")
                return led.finish("rejected").outcome
            led.mark("approval_granted")
        if "provisioned" in phases:  # issued by an earlier attempt: only wait for health again
            cluster = led.entry.notes["cluster"]
        else:
            led.begin("provisioned")
            try:
                cluster, notes = self.actions.act(rung, self.fault)
            except JobRunning as e:
                led.fail("provisioned", e, outcome="stood-down")
                return led.finish("stood-down").outcome
            except LifeboatError as e:
                led.fail("provisioned", e)
                return led.finish("failed").outcome
            with led.batch():
                for key, value in {**notes, "cluster": cluster}.items():
                    led.note(key, value)
                led.mark("provisioned")
        try:
            led.mark("first_step", self.actions.healthy(cluster, rung.rto_target.total_seconds()))
        except LifeboatError as e:
            led.fail("first_step", e)
            return led.finish("failed").outcome
        return led.finish("completed").outcome

    def _asked(self, rung: RungSetting) -> str:
        f = self.fault
        return f"{rung.name} after a {f.kind or f.scope} fault (rank {f.rank}, {f.host or 'host unknown'})"

    def _failover(self, whole: RtoLedger) -> str:
        if self.failover is None:
            raise ValueError("the ladder reached failover with no failover to run")
        whole.note("failover run", "started")  # a re-run finds it started: the failover's own re-run rules
        try:
            run_id, outcome = self.failover()
        except LifeboatError as e:
            whole.note("failover run", f"raised {type(e).__name__}: {e}")
            return "failed"
        whole.note("failover run", f"{run_id}: {outcome}")
        return "completed" if outcome == "completed" else "failed"
