"""The `certify` flow: certify a runbook's replica, record the RPO, raise an event on breach.

Scheduled from prefect.yaml so a stale replica is noticed before an outage, not during
one. The work is `lifeboat_dr.core.certify`; this only wires it to Prefect."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_table_artifact

from lifeboat_dr.core.certify import CertifyReport, rpo_row, verdict
from lifeboat_dr.flows.wiring import certify_runbook
from lifeboat_dr.providers.orchestrator.prefect_api import emit as emit_event

BREACH_EVENT = "lifeboat.rpo.breached"


@task
def certify_replica_task(rb, deep: bool) -> CertifyReport:
    return certify_runbook(rb, deep=deep)


@task
def record_rpo(rb, report: CertifyReport) -> dict:
    row = rpo_row(report, rb.rpo_target)
    create_table_artifact(table=[row], key=f"rpo-{rb.name}", description=f"RPO of {rb.name}'s replica")
    if row["breached"]:
        emit_event(
            event=BREACH_EVENT,
            resource={"prefect.resource.id": f"lifeboat.runbook.{rb.name}", "prefect.resource.name": rb.name},
            payload=row,
        )
    return row


@flow(name="certify")
def certify(runbook: str, deep: bool = False) -> dict:
    """Certify the newest replica checkpoint and record its RPO; emit an event over target.

    Args:
        runbook: Path of the runbook YAML on the worker.
        deep: Stream and checksum every object on both sides, even where metadata would do.
    """
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    report = certify_replica_task(rb, deep)
    row = record_rpo(rb, report)
    return row | {"exit": verdict(report, rb.rpo_target)}
