"""The `failover` flow: the core's step graph (`lifeboat_dr.core.failover.graph`), walked with each
step as a Prefect task run. Thin: `lifeboat_dr.flows.wiring` builds the steps, the settings, the ledger
and the gate from the runbook (loaded once), `lifeboat_dr.core.failover.walk` walks the graph, and
`lifeboat_dr.flows.runner.PrefectRunner` maps a step to a task run with the runbook's retries.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prefect import flow
from prefect.states import Cancelled, Completed

from lifeboat_dr.core.failover import walk
from lifeboat_dr.core.failover.contract import FailoverSettings, FailoverSteps, Gate
from lifeboat_dr.core.failover.walk import fence_read_back
from lifeboat_dr.core.ledger import LedgerEntry, RtoLedger
from lifeboat_dr.flows.grouping import FleetMember
from lifeboat_dr.flows.runner import PrefectRunner
from lifeboat_dr.kernel.errors import LifeboatError, StandDown, WriteFailed


def _now() -> datetime:
    return datetime.now(UTC)


def execute(
    settings: FailoverSettings,
    steps: FailoverSteps,
    ledger: RtoLedger,
    gate: Gate,
    *,
    run_id: str,
    drill: bool = False,
    keep_cluster: bool = False,
) -> LedgerEntry:
    """Walk the step graph inside a flow run, each step a task run."""
    return walk.execute(
        settings,
        steps,
        ledger,
        gate,
        run_id=run_id,
        drill=drill,
        keep_cluster=keep_cluster,
        runner=PrefectRunner(settings.retries, settings.retry_delay_s),
    )


def _runbook_name(path: str) -> str:
    from lifeboat_dr.runbooks.loader import load_runbook

    try:
        return load_runbook(path).name
    except Exception:  # the flow itself reports a bad runbook; the name only labels the run
        return Path(str(path)).stem or "unknown"


def _run_name() -> str:
    """`failover-<runbook>-<UTC time>`: a run an on-call finds by name in the UI."""
    from prefect.runtime import flow_run

    return f"failover-{_runbook_name(flow_run.parameters.get('runbook', ''))}-{_now():%Y%m%dT%H%M%SZ}"


def run_tags(rb, *, dry_run: bool) -> list[str]:
    """Tags to filter runs by in the UI: the runbook, its workload, and dry runs (drills are
    runs of the `drill` flow)."""
    tags = [f"runbook:{rb.name}", f"workload:{rb.workload}"]
    if dry_run:
        tags.append("dry-run")
    return tags


def final_state(entry: LedgerEntry, result: dict):
    """The run's Prefect state, read at a glance: Completed when the job runs again on the
    secondary; "Stood down" (a Completed state: nothing failed, another run has the runbook,
    and a worker logs one line, where a Cancelled state with a result logs Prefect's 40-line
    TypeError); Cancelled (grey) with the reason when rejected or aborted. A failure raises
    inside the walk, so Prefect marks the run Failed (red) with the error."""
    if entry.outcome == "completed":
        return result
    if entry.outcome == "stood-down":
        return Completed(
            name="Stood down", message=f"stood down: {entry.notes.get('stood down', '')}"[:500], data=result
        )
    why = "; ".join(f.error for f in entry.failures) or entry.notes.get("stood down") or entry.outcome
    return Cancelled(message=f"failover {entry.outcome}: {why}"[:500], data=result)


def outcome_of(state) -> dict:
    """The flow's result dict from its final state (`failover(..., return_state=True)`):
    a Cancelled run still returns what it recorded; a Failed one raises its error."""
    if state.is_cancelled():
        return state.result(raise_on_failure=False)
    return state.result()


@flow(name="failover", flow_run_name=_run_name, log_prints=True)
def failover(
    runbook: str,
    dry_run: bool = False,
    outage_started_at: datetime | None = None,
    detected_at: datetime | None = None,
    evidence: list[str] | None = None,
    force: bool = False,
    approval: Literal["wait", "approve", "reject"] | None = None,
    fleet: list[FleetMember] | None = None,
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
        force: Fail over even if the quorum does not confirm an outage right now: a human has
            (written in the ledger).
        approval: Without Slack: wait for the Prefect UI or `lifeboat approve` (the default,
            and `wait` in a dry run), or decide at once: `approve` only in a dry run or for a
            runbook whose every site is on this machine (a parameter is not a person).
        fleet: Set by `lifeboat deploy`: every deployed runbook that groups. Those of this
            runbook's failed region and lock store (`fleet.group_window`) join one fleet
            failover instead of each failing over alone (docs/fleet.md). Empty: fail over alone.
    """
    from prefect.runtime import flow_run

    run_id = str(flow_run.id or f"local-{_now():%Y%m%dT%H%M%S}")
    return run_failover(
        runbook,
        run_id=run_id,
        flow_run=flow_run,
        dry_run=dry_run,
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=force,
        approval=approval,
        fleet=fleet,
    )


def run_failover(
    runbook: str,
    *,
    run_id: str,
    flow_run,
    dry_run: bool = False,
    outage_started_at: datetime | None = None,
    detected_at: datetime | None = None,
    evidence: list[str] | None = None,
    force: bool = False,
    approval: str | None = None,
    fleet: list[FleetMember] | None = None,
    gate: Gate | None = None,
) -> dict:
    """The `failover` flow's body for one run id, inside a flow run (`flow_run`: Prefect's
    runtime view of it). `gate` replaces the runbook's own approval gate: only code passes
    one (the fleet flow, with the decision its own gate verified), never a parameter; a
    failover given one never groups (`flows/grouping.py`)."""
    from lifeboat_dr.flows.grouping import fellows, should_group
    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.record import publish
    from lifeboat_dr.flows.wiring import build_gate, build_ledger, build_steps, providers_for, settings_for
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task
    from lifeboat_dr.providers.image_registry import FakeRegistry
    from lifeboat_dr.providers.orchestrator.prefect_api import tag_run

    rb = load_runbook_and_task(runbook)  # the task YAML too: a typo stops here, not after approval
    if rb.serving is not None:  # realtime serving: verify the hot standby, move traffic
        from lifeboat_dr.flows.serving import serve_failover

        return serve_failover(
            rb,
            run_id=run_id,
            outage_started_at=outage_started_at,
            detected_at=detected_at,
            evidence=evidence,
            force=force,
            approval=approval,
            dry_run=dry_run,
        )
    if should_group(rb, fleet=fleet, gated=gate is not None, dry_run=dry_run, force=force):
        group = fellows(rb, runbook, fleet)
        if group is not None:
            return _grouped(rb, group, run_id=run_id, outage_started_at=outage_started_at, evidence=evidence)
    providers = None
    sky_rehearsal = None
    if dry_run and rb.secondary.infra != "local":  # the user's task through SkyPilot's dry-run launch
        from lifeboat_dr.flows.wiring import sky_dry_run

        sky_rehearsal = sky_dry_run(rb)
        print(sky_rehearsal.summary())
    if dry_run:  # the same steps over a sandboxed copy: local stores and compute, a fake registry
        from lifeboat_dr.flows.sandbox import sandbox_images, sandboxed  # the stand-in trainer, numpy

        registry = FakeRegistry(sandbox_images(rb))
        rerun = bool(flow_run.run_count and flow_run.run_count > 1)  # goes on in the sandbox it made
        rb = sandboxed(rb, run_id, keep=rerun)
        providers = providers_for(rb, registry=registry)
        evidence, force = evidence or ["dry run: simulated outage"], True
        approval = approval or "approve"
    # a parameter is not a person: refused here, before anything is built, when it would approve
    guard = Guard(
        rb, run_id, action="failover", approval=approval, rehearsal=dry_run, force=force and not dry_run
    )
    steps = build_steps(
        rb,
        run_id=run_id,
        providers=providers,
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=force,
    )
    # a re-run of this run id goes on from what its earlier attempt recorded (core/failover/rerun.py)
    ledger = build_ledger(rb, run_id=run_id, drill="dry-run" if dry_run else None, reopen=True)
    if sky_rehearsal is not None:
        ledger.note("skypilot dry run", sky_rehearsal.summary())
    _note_start_up(ledger, flow_run)
    gate = gate or build_gate(rb, console=guard.console, drill=dry_run)
    if flow_run.id and run_id == str(flow_run.id):  # a fleet's member is no run of its own
        try:
            tag_run(run_id, run_tags(rb, dry_run=dry_run))
        except LifeboatError as e:  # labels only: never a reason to stop a failover
            print(f"could not tag the run: {e}")
    try:
        with guard.acting(ledger, gate.notify, store=steps.p.secondary):
            entry = execute(settings_for(rb), steps, ledger, gate, run_id=run_id, drill=dry_run)
    except StandDown as e:  # another run holds the lock (a re-run: an earlier attempt may have fenced)
        if ledger.prior is not None:
            fence_read_back(steps, ledger, "this re-run stood down")
        ledger.note("stood down", str(e))
        entry = ledger.finish("stood-down")
    except LifeboatError as e:  # a re-run that could not even take the lock: did an earlier attempt fence?
        if ledger.prior is not None:
            with suppress(WriteFailed):
                fence_read_back(steps, ledger, f"this re-run failed ({e})")
        raise
    finally:
        picture = publish(ledger.entry)
    return final_state(
        entry,
        {
            "run_id": run_id,
            "outcome": entry.outcome,
            "rto_s": _secs(entry.rto),
            "rpo_s": _secs(entry.rpo),
            "checkpoint": entry.checkpoint,
            "timeline": str(picture) if picture else None,
        },
    )


def _grouped(rb, group, *, run_id: str, outage_started_at, evidence):
    """This confirmed outage joins its region's fleet run: a stood-down entry naming it."""
    from lifeboat_dr.flows.grouping import GroupingFailed, join_fleet
    from lifeboat_dr.flows.record import publish

    try:
        entry, grouped = join_fleet(
            rb, group, run_id=run_id, outage_started_at=outage_started_at, evidence=evidence
        )
    except GroupingFailed as e:
        if e.entry is not None:
            publish(e.entry)
        raise
    picture = publish(entry)
    return final_state(
        entry,
        {
            "run_id": run_id,
            "outcome": entry.outcome,
            "rto_s": None,
            "rpo_s": None,
            "checkpoint": None,
            "fleet_run_id": grouped.fleet_run_id if grouped else None,
            "timeline": str(picture) if picture else None,
        },
    )


def _note_start_up(ledger: RtoLedger, flow_run) -> None:
    """Flow start-up (scheduled → the walk begins) apart from the confirm step's own time, and
    what the start says of crash recovery: a re-run, or a worker that sends no heartbeat."""
    attempt = flow_run.run_count
    if attempt and attempt > 1:  # scheduled again by lifeboat-failover-rerun, or a retry
        ledger.note(
            "re-run",
            f"attempt {attempt}: an earlier attempt of this run stopped unfinished (its worker was lost); "
            "done steps are found done (same run id)",
        )
    if _deployed() and _heartbeat_s() is None:  # a worker's run, not one from a terminal
        ledger.note(
            "heartbeat",
            "none: this worker sets no PREFECT_FLOWS_HEARTBEAT_FREQUENCY, so if it dies mid-failover "
            "nothing marks the run Crashed or runs it again (start workers as lifeboat deploy prints)",
        )
    scheduled = flow_run.scheduled_start_time
    if scheduled is not None:
        seconds = (_now() - scheduled).total_seconds()
        ledger.note("flow start-up", f"{seconds:.2f}s from the run's scheduled start to its first step")


def _deployed() -> bool:
    """From the run the engine holds: `prefect.runtime.deployment.id` reads the run from the
    API again, a round trip in the start-up before the first step (#31)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    return bool(context and context.flow_run and context.flow_run.deployment_id)


def _heartbeat_s() -> int | None:
    from prefect.settings import get_current_settings

    return get_current_settings().flows.heartbeat_frequency


def _secs(td) -> float | None:
    return None if td is None else td.total_seconds()
