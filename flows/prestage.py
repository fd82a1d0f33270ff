"""The `prestage` flow: keep a warm standby warm. Scheduled in prefect.yaml.

Stage the runbook's weights into the secondary store, check images and weights where the
secondary pulls from, publish the readiness as an artifact and an event
(`lifeboat_dr.core.prestage.ready` / `lifeboat_dr.core.prestage.not-ready`) that an automation can page on.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from lifeboat_dr.core.prestage import (
    PrestageReadiness,
    plan_readiness,
    readiness_markdown,
    stage_plan_weights,
)
from lifeboat_dr.providers.orchestrator.prefect_api import emit as emit_event


@task(retries=2, retry_delay_seconds=10)
def stage(runbook_path: str) -> list[str]:
    from lifeboat_dr.flows.wiring import prestage_plan, store_opener
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook_path)
    return sorted(stage_plan_weights(prestage_plan(rb), store_opener(rb)))


@task(retries=1, retry_delay_seconds=5)
def check(runbook_path: str, mirrors: dict[str, str] | None) -> PrestageReadiness:
    from lifeboat_dr.flows.wiring import prestage_plan, registry_for, store_opener
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook_path)
    return plan_readiness(prestage_plan(rb), registry_for(rb, mirror=mirrors), store_opener(rb))


@flow(name="prestage", log_prints=True)
def prestage(runbook: str, stage_weights: bool = True, mirrors: dict[str, str] | None = None) -> dict:
    """Stage weights, then report readiness (images at their digests, weights staged).

    Args:
        runbook: Path of the runbook YAML on the worker.
        stage_weights: Copy the runbook's weights to the secondary store first.
        mirrors: Registry mirrors the secondary pulls from, registry host -> mirror URL (default: the
            runbook's prestage.mirrors).
    """
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    if stage_weights and rb.prestage.weights:
        stage(runbook)
    readiness = check(runbook, mirrors)
    create_markdown_artifact(
        key=f"prestage-{rb.name}",
        markdown=readiness_markdown(rb.name, readiness),
        description=f"Prestage readiness of {rb.name}",
    )
    emit_event(
        event=f"lifeboat_dr.core.prestage.{'ready' if readiness.ready else 'not-ready'}",
        resource={"prefect.resource.id": f"lifeboat.runbook.{rb.name}"},
        payload={"items": list(readiness.items)},
    )
    print(readiness.summary())
    return {
        "runbook": rb.name,
        "ready": readiness.ready,
        "items": list(readiness.items),
        "images": [asdict(c) for c in readiness.images],
        "weights": [asdict(c) for c in readiness.weights],
    }
