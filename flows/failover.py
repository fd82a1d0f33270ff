"""The `failover` flow: confirm → fence → (certify ∥ plan ∥ prestage) → approval → provision →
resume → prove → record. Thin: `flows.wiring` builds the steps from the runbook's providers,
`execute` walks the step graph and keeps the ledger, the gate asks the humans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from lifeboat.errors import ProviderUnavailable, StopFailover
from lifeboat.failover import Certified, FailoverSteps, Provisioned, expected_rto
from lifeboat.ledger import PHASES, LedgerEntry, RtoLedger
from lifeboat.prestage import PrestageReadiness
from providers.chat.base import ApprovalCard
from providers.compute.base import PlanOption
from runbooks.model import Runbook


class Decision(Protocol):
    approved: bool
    reason: str
    approver: str


class Gate(Protocol):
    """Asks the humans (or the policy) and tells them how it went."""

    def request(self, card: ApprovalCard, ledger: RtoLedger) -> Decision:
        """Post the card and wait; records approval_requested/granted (or the rejection)."""
        ...

    def notify(self, text: str) -> None: ...


@dataclass(frozen=True)
class Timed:
    value: Any
    started: datetime
    finished: datetime


def _now() -> datetime:
    return datetime.now(UTC)


def _retryable(task, task_run, state) -> bool:
    """Retry a step only on errors the provider says are transient."""
    try:
        state.result()
    except ProviderUnavailable:
        return True
    except BaseException:
        return False
    return False


@task(cache_policy=NO_CACHE, persist_result=False)
def _step(steps: FailoverSteps, name: str, *args) -> Timed:
    started = _now()
    value = getattr(steps, name)(*args)
    return Timed(value, started, _now())


def _start(rb: Runbook, name: str, steps: FailoverSteps, *args):
    """Submit one step as a task run, with the runbook's retry policy."""
    policy = rb.failover
    task_ = _step.with_options(
        name=name,
        retries=policy.retries,
        retry_delay_seconds=policy.retry_delay.total_seconds(),
        retry_condition_fn=_retryable,
    )
    return task_.submit(steps, name, *args)


def _wait(rb: Runbook, name: str, future) -> Timed:
    """The step's result, or StopFailover once it outlives the runbook's step timeout.
    (Prefect cannot interrupt a step in a worker thread; the flow stops waiting instead.)"""
    limit = rb.failover.step_timeout.total_seconds()
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        raise StopFailover(f"step {name} ran past {limit:g}s") from None


def _run(rb: Runbook, name: str, steps: FailoverSteps, *args) -> Timed:
    return _wait(rb, name, _start(rb, name, steps, *args))


def execute(
    rb: Runbook,
    steps: FailoverSteps,
    ledger: RtoLedger,
    gate: Gate,
    *,
    run_id: str,
    drill: bool = False,
    clock: Callable[[], datetime] = _now,
) -> LedgerEntry:
    """Walk the step graph inside a flow run; every phase lands in `ledger`."""
    cluster: Provisioned | None = None
    early = None
    try:
        confirmed = _run(rb, "confirm", steps)
        ledger.mark("outage_start", confirmed.value.outage_started_at)
        ledger.mark("detected", confirmed.value.detected_at)
        ledger.mark("confirmed", confirmed.finished)

        fenced = _run(rb, "fence", steps)
        ledger.mark("fenced", fenced.finished)
        stopped = (
            "primary job stopped"
            if fenced.value.primary_stopped
            else "primary job not stopped (unnamed or unreachable)"
        )
        ledger.note("fence", f"epoch {fenced.value.epoch} on {', '.join(fenced.value.stores)}; {stopped}")

        branches = {name: _start(rb, name, steps) for name in ("certify", "plan", "prestage")}
        if rb.approval.provision_before_approval:
            plan = _wait(rb, "plan", branches["plan"])
            early = _start(rb, "provision", steps, plan.value)
        done = {}
        for name, milestone in (("certify", "certified"), ("plan", "planned"), ("prestage", "prestaged")):
            done[name] = _wait(rb, name, branches[name])
            ledger.begin(milestone, done[name].started)
            ledger.mark(milestone, done[name].finished)
        checkpoint: Certified = done["certify"].value
        ledger.checkpoint(checkpoint.uri, checkpoint.written_at)
        ledger.note("certification", "; ".join([f"mode {checkpoint.mode}", *checkpoint.rejected]))
        options, readiness = done["plan"].value, done["prestage"].value
        if options and options[0].price_source:
            ledger.note("plan prices", options[0].price_source)

        card = _card(rb, run_id, drill, confirmed.value, checkpoint, options, readiness, clock())
        decision = gate.request(card, ledger)
        if not decision.approved:
            if early is not None and (cluster := _settled(early)) is not None:
                steps.teardown(cluster)  # provisioned while waiting: cheap to give back
                cluster = None
            return ledger.finish("aborted")

        provisioned = (
            _wait(rb, "provision", early) if early is not None else _run(rb, "provision", steps, options)
        )
        cluster = provisioned.value
        ledger.begin("provisioned", provisioned.started)
        ledger.mark("provisioned", provisioned.finished)
        ledger.note("cluster", f"{cluster.cluster} on {cluster.option.describe()}")
        ledger.note("provision attempts", "; ".join(cluster.attempts))

        _resume_and_prove(rb, steps, ledger, gate, cluster, checkpoint)
        ledger.mark("parity_passed")
        return ledger.finish("completed")
    except BaseException as e:
        heading = next((p for p in PHASES if p not in ledger.entry.phases), PHASES[-1])
        ledger.fail(heading, e)
        gate.notify(f"Lifeboat failover of {rb.name} failed before {heading}: {e}")
        if cluster is None and early is not None:
            cluster = _settled(early)
        if cluster is not None:
            steps.teardown(cluster)
            cluster = None
        raise
    finally:
        if drill and cluster is not None:
            steps.teardown(cluster)


def _card(
    rb: Runbook,
    run_id,
    drill: bool,
    confirmed,
    checkpoint: Certified,
    options,
    readiness: PrestageReadiness,
    now,
) -> ApprovalCard:
    first: PlanOption | None = options[0] if options else None
    then = f" (then {', '.join(o.infra for o in options[1:3])})" if len(options) > 1 else ""
    return ApprovalCard(
        runbook=rb.name,
        run_id=run_id,
        drill=drill,
        channel=rb.approval.channel,
        evidence=list(confirmed.evidence),
        checkpoint=f"{checkpoint.uri} (step {checkpoint.step}, written {checkpoint.written_at:%Y-%m-%d %H:%M:%S}Z)",
        rpo=max(confirmed.outage_started_at - checkpoint.written_at, timedelta(0)),
        rpo_target=rb.rpo_target,
        plan=f"{first.describe()}{then}" if first else None,
        prestage=[readiness.summary(), *readiness.items],
        expected_rto=expected_rto(confirmed.outage_started_at, now, rb.failover.expected_ready),
        rto_target=rb.rto_target,
        approvers=list(rb.approval.approvers),
    )


def _resume_and_prove(rb, steps, ledger, gate, cluster, checkpoint: Certified) -> None:
    """Resume, then gate on loss parity; on failure roll back once or page, as the runbook says."""
    for attempt in (1, 2):
        resumed = _run(rb, "resume", steps, cluster, checkpoint).value
        ledger.mark("checkpoint_loaded", resumed.checkpoint_loaded_at, again=attempt > 1)
        ledger.mark("first_step", resumed.first_step_at, again=attempt > 1)  # RTO: to the step that stays
        parity = _run(rb, "prove", steps, cluster, checkpoint).value
        ledger.note("parity", parity.detail)
        if parity.passed:
            return
        if rb.verify.on_parity_failure == "page" or attempt == 2:
            gate.notify(f"Lifeboat: loss parity failed for {rb.name} from {checkpoint.uri}: {parity.detail}")
            raise StopFailover(f"loss parity failed from {checkpoint.uri}: {parity.detail}")
        older = _run(rb, "certify", steps, checkpoint.step).value
        ledger.note(
            "rollback",
            f"parity failed from step {checkpoint.step} ({parity.detail}); rolled back to step {older.step}",
        )
        ledger.checkpoint(older.uri, older.written_at)
        checkpoint = older
    raise AssertionError("unreachable")


def _settled(future) -> Provisioned | None:
    try:
        return future.result().value
    except BaseException:
        return None


@flow(name="failover", log_prints=True)
def failover(
    runbook: str,
    dry_run: bool = False,
    outage_started_at: datetime | None = None,
    detected_at: datetime | None = None,
    evidence: list[str] | None = None,
    force: bool = False,
    approval: Literal["wait", "approve", "reject"] = "wait",
    drill: str | None = None,
) -> dict:
    """Fail a protected job over to its secondary site; measure and record RTO and RPO.

    Args:
        runbook: Path of the runbook YAML on the worker, e.g. runbooks/llama-70b-pretrain.yaml.
        dry_run: Rehearse in a sandbox: local stores and compute, the tiny trainer as the job.
            No cloud, no GPUs, no Slack.
        outage_started_at: When the outage began (set by the automation from the watch flow's quorum).
        detected_at: When detection confirmed it (set by the automation).
        evidence: The agreeing signals, one line each (set by the automation). Empty: check the
            quorum now.
        force: Fail over even if the quorum does not confirm an outage right now: a human has.
        approval: Without Slack: wait for the Prefect UI or `lifeboat approve`, or decide at once
            (demos, drills).
        drill: Drill kind when this is a rehearsal: its own cluster name, guaranteed teardown,
            marked in the ledger.
    """
    from prefect.runtime import flow_run

    from flows.record import publish
    from flows.sandbox import sandbox_images, sandboxed
    from flows.wiring import Providers, build_gate, build_ledger, build_steps
    from providers.compute.skycheck import check_runbook
    from providers.registry import FakeRegistry

    rb = check_runbook(runbook)  # the task YAML too: a typo stops here, not after approval
    run_id = str(flow_run.id or f"local-{_now():%Y%m%dT%H%M%S}")
    providers = None
    rehearsal = None
    if dry_run and rb.secondary.infra != "local":  # the user's task through SkyPilot's dry-run launch
        from providers.compute.skydryrun import dry_run_launch

        rehearsal = dry_run_launch(rb)
        print(rehearsal.summary())
    if dry_run:  # the same steps over a sandboxed copy: local stores and compute, a fake registry
        registry = FakeRegistry(sandbox_images(rb))
        rb = sandboxed(rb, run_id)
        providers = Providers.for_runbook(rb, registry=registry)
        evidence, force = evidence or ["dry run: simulated outage"], True
        approval = "approve" if approval == "wait" else approval
    steps = build_steps(
        rb,
        run_id=run_id,
        drill=drill,
        providers=providers,
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=force,
    )
    ledger = build_ledger(rb, run_id=run_id, drill=drill or ("dry-run" if dry_run else None))
    if rehearsal is not None:
        ledger.note("skypilot dry run", rehearsal.summary())
    try:
        entry = execute(
            rb, steps, ledger, build_gate(rb, console=approval), run_id=run_id, drill=bool(drill or dry_run)
        )
    finally:
        picture = publish(ledger.entry)
    return {
        "run_id": run_id,
        "outcome": entry.outcome,
        "rto_s": _secs(entry.rto),
        "rpo_s": _secs(entry.rpo),
        "checkpoint": entry.checkpoint,
        "timeline": str(picture) if picture else None,
    }


def _secs(td) -> float | None:
    return None if td is None else td.total_seconds()
