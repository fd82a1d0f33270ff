"""The `recover` flow: the smallest recovery that works, after a training guard's fault.

The composition root of the ladder (`lifeboat_dr.core.guard.recovery`): the runbook's
`recovery.rungs` resolved into settings, the compute backend of the runbook (the job's
cluster is `primary.cluster` on `primary.infra`), the newest committed checkpoint of the
primary's store, the ledger's sink, the approval gate for `approval: wait` rungs, and the
failover flow for the `failover` rung (as a subflow: its own run id and ledger entry). The
walk itself is plain Python, tested over the fake compute.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from prefect import flow

from lifeboat_dr.core.guard.ladder import fault_from_event
from lifeboat_dr.core.guard.recovery import ComputeRungs, Ledgers, RungSetting, Walk


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
    site state's epoch (`core.commit`: a job fenced out since exits 75, and its rung fails)."""
    from lifeboat_dr.core.sitestate import read_site_state, site_stores
    from lifeboat_dr.flows.wiring import job_spec, open_sites, open_witness

    job = job_spec(rb)
    epoch = read_site_state(site_stores(*open_sites(rb), open_witness(rb)), runbook=rb.name).epoch
    env = {**job.env, "LIFEBOAT_STORE": home, "LIFEBOAT_EPOCH": str(epoch)}
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

    from lifeboat_dr.flows.wiring import compute_for, ledger_sink
    from lifeboat_dr.providers.compute.base import PlanOption
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task

    rb = load_runbook_and_task(runbook)
    detected = datetime.now(UTC)
    outage = occurred or detected
    seen = fault_from_event(fault, scope, zone)
    home = rb.store_uri(rb.primary.store)  # every rung but failover stays on the primary's site
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
    print(f"recovery {entry.run_id}: {entry.outcome}, by {entry.notes.get('recovered_by', 'no rung')}")
    return {
        "run_id": entry.run_id,
        "outcome": entry.outcome,
        "recovered_by": entry.notes.get("recovered_by"),
        "rto_s": entry.rto.total_seconds() if entry.rto else None,
    }
