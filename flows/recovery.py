"""The `recover` flow: the smallest recovery that works, after a training guard's fault.

The composition root of the ladder (`lifeboat_dr.core.guard.recovery`): the runbook's
`recovery.rungs` resolved into settings, the compute backend of the runbook (the job's
cluster is `primary.cluster` on `primary.infra`), the newest committed checkpoint of the
primary's store, the ledger's sink, the approval gate for `approval: wait` rungs, and the
failover flow for the `failover` rung (as a subflow: its own run id and ledger entry). The
walk itself is plain Python, tested over the fake compute.

Started by the runbook's `recover` deployment (prefect.yaml) from a `lifeboat.training.fault`
event that names the runbook. The walk holds the runbook's recovery lock (`core.lock`,
`RECOVERY_LOCK_KEY` on the secondary's store, as the failover's; its run id the ladder's,
`recovery-<event id>`): of two deliveries at once one walks, the other stands down at once
(two events for one fault) or, the same event, waits up to a lease for the first to end or
die and goes on from what it recorded. It is not the failover's lock: a recovery holding that
would stand down a failover of a confirmed outage that nothing starts again; the failover rung
takes the failover's lock itself, and a restart racing a failover's fence is fenced out
(`core.commit`, the job's epoch). A site state whose active site is the secondary (a failover
done) fails the run in one line, before any rung acts.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from prefect import flow
from prefect.states import Completed

from lifeboat_dr.core.guard.ladder import fault_from_event
from lifeboat_dr.core.guard.recovery import ComputeRungs, Ledgers, RungSetting, Walk, ladder_id
from lifeboat_dr.kernel.errors import StandDown, StopFailover


def rung_settings(rb) -> list[RungSetting]:
    """The runbook's rungs, each with its approval and RTO target (default: the runbook's)."""
    return [
        RungSetting(r.rung, r.approval or "auto", r.rto or rb.rto_target, tuple(r.zones))
        for r in rb.recovery.rungs
    ]


def newest_committed(rb) -> tuple[str, int] | None:
    """The primary store's newest committed checkpoint (URI, step); None: none committed."""
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.flows.wiring import open_site

    store = open_site(rb, rb.primary)
    found = committed_checkpoints(store, rb.checkpoint.layout.value)
    return (f"{store.uri.rstrip('/')}/{found[0].prefix}", found[0].step) if found else None


def primary_job(rb, home: str):
    """The runbook's job as it runs on the primary: checkpoints to the primary's store at the
    site state's epoch (`core.commit`: a job fenced out since exits 75, and its rung fails),
    naming its runbook to the guard (`wiring.runbook_env`: its next fault is recovered too).
    `StopFailover` when the site state says the secondary is active: the job runs there since a
    failover, and the ladder's rungs act on the primary's cluster only."""
    from lifeboat_dr.core.sitestate import read_site_state, site_stores
    from lifeboat_dr.flows.wiring import job_spec, open_sites, open_witness, runbook_env

    job = job_spec(rb)
    state = read_site_state(site_stores(*open_sites(rb), open_witness(rb)), runbook=rb.name)
    if state.active != "primary":
        raise StopFailover(
            f"runbook {rb.name}: the {state.active} is active (epoch {state.epoch}): the ladder "
            "recovers the job on the primary's cluster only; nothing done"
        )
    env = {**job.env, **runbook_env(rb), "LIFEBOAT_STORE": home, "LIFEBOAT_EPOCH": str(state.epoch)}
    return replace(job, store_uri=home, primary_store_uri=None, env=env)


def _approve(rb, run_id: str):
    from lifeboat_dr.flows.wiring import build_gate
    from lifeboat_dr.providers.chat.base import ApprovalCard

    gate = build_gate(rb, console="wait")

    def approve(rung: str, what: str) -> bool:
        card = ApprovalCard(
            runbook=rb.name,
            run_id=run_id,
            channel=rb.approval.channel,
            evidence=[what],
            approvers=list(rb.approval.approvers),
            action="recovery",
            plan=rung,
        )
        return gate.request(card).approved

    return approve


def _failover(runbook: str, outage: datetime, detected: datetime, why: str):
    def run() -> tuple[str, str]:
        from lifeboat_dr.flows.failover import failover, outcome_of

        result = outcome_of(
            failover(
                runbook, outage_started_at=outage, detected_at=detected, evidence=[why], return_state=True
            )
        )
        return str(result.get("run_id")), str(result.get("outcome"))

    return run


@flow(name="recover", log_prints=True)
def recover(
    runbook: str,
    event_id: str,
    fault: dict[str, Any],
    scope: Literal["node", "zone", "region", "provider"] = "node",
    zone: str = "",
    occurred: datetime | None = None,
) -> dict:
    """Walk the runbook's recovery ladder for one training fault; one walk per `event_id`.

    Args:
        runbook: Path of the runbook YAML on the worker.
        event_id: The `lifeboat.training.fault` event's id: the same event twice walks once.
        fault: The event's payload (kind, rank, host, step, detail).
        scope: How wide the outage is, from detection: node, zone, region or provider.
        zone: The failed cluster's cloud/region/zone, when known (other-zone skips it).
        occurred: When the fault happened (default: now); each rung's RTO runs from it.
    """
    from prefect.runtime import flow_run

    from lifeboat_dr.core.lock import RECOVERY_LOCK_KEY, RunbookLock
    from lifeboat_dr.flows.guard import lock_lease_s
    from lifeboat_dr.flows.wiring import compute_for, ledger_sink, open_site
    from lifeboat_dr.providers.compute.base import PlanOption
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task

    run_id = ladder_id(event_id)  # a hostile id fails here, in one line, before anything is read
    rb = load_runbook_and_task(runbook)
    detected = datetime.now(UTC)
    outage = occurred or detected
    seen = fault_from_event(fault, scope, zone)
    home = rb.store_uri(rb.primary.store)  # every rung but failover stays on the primary's site
    lock = RunbookLock(
        open_site(rb, rb.secondary),
        rb.name,
        run_id,
        action="recovery",
        lease_s=lock_lease_s(),
        key=RECOVERY_LOCK_KEY,
    )
    try:
        lock.acquire()
    except StandDown as e:  # another walk of this runbook's ladder is acting
        print(f"recovery {run_id}: stood down: {e}")
        return Completed(
            name="Stood down",
            message=f"stood down: {e}"[:500],
            data={"run_id": run_id, "outcome": "stood-down", "recovered_by": None, "rto_s": None},
        )
    try:
        rungs = ComputeRungs(
            compute_for(rb, store_uri=home, primary_store_uri=None),  # SkyPilot mounts the primary's store
            rb.primary.cluster or "",
            PlanOption(rb.primary.infra, None, None, False, None),
            primary_job(rb, home),
            lambda: newest_committed(rb),
            first_step=True,
        )
        why = f"training guard: {seen.kind or 'fault'} on {seen.host or 'unknown host'} ({scope} outage)"
        entry = Walk(
            event_id,
            seen,
            rung_settings(rb),
            rungs,
            Ledgers(rb.name, ledger_sink(rb), rto_target=rb.rto_target, rpo_target=rb.rpo_target),
            outage_start=outage,
            detected=detected,
            approve=_approve(rb, str(flow_run.id or event_id)),
            failover=_failover(runbook, outage, detected, why),
        ).run()
    finally:
        lock.release()
    print(f"recovery {entry.run_id}: {entry.outcome}, by {entry.notes.get('recovered_by', 'no rung')}")
    return {
        "run_id": entry.run_id,
        "outcome": entry.outcome,
        "recovered_by": entry.notes.get("recovered_by"),
        "rto_s": entry.rto.total_seconds() if entry.rto else None,
    }
