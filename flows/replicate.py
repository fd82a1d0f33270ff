"""The `replicate` flow: committed checkpoints to the secondary store, lag events, retention.

Thin on purpose: every step is a core function (lifeboat_dr.core.replication, lifeboat_dr.core.retention)
over the runbook's `ReplicationSettings` (flows/wiring.py);
the flow adds scheduling, retries, an artifact and the `lifeboat.replication.lag_exceeded`
event (resource `lifeboat.runbook.<name>`) that an automation can page on.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from lifeboat_dr.core.bucket_replication import bucket_pass
from lifeboat_dr.core.checkpoints.layouts import discover
from lifeboat_dr.core.replication.copying import ReplicationReport, replicate_checkpoints
from lifeboat_dr.core.replication.direction import (
    Direction,
    ReplicationSettings,
    direction,
    sources_to_replicate,
)
from lifeboat_dr.core.replication.lag import LAG_EVENT, LagLog, default_lag_log
from lifeboat_dr.core.retention import retention_for
from lifeboat_dr.flows.wiring import one_bucket, open_sites, open_witness, replication_settings
from lifeboat_dr.kernel.errors import ProviderUnavailable, StandDown
from lifeboat_dr.providers.orchestrator.prefect_api import emit as emit_event
from lifeboat_dr.runbooks.loader import load_runbook


@task(cache_policy=NO_CACHE)
def find_direction(
    settings: ReplicationSettings, primary, secondary, dry_run: bool, witness=None
) -> Direction:
    return direction(settings.runbook, primary, secondary, dry_run=dry_run, witness=witness)


@task(cache_policy=NO_CACHE)
def find_sources(settings: ReplicationSettings, way: Direction) -> list:
    return sources_to_replicate(settings, way)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=30)
def copy_checkpoints(
    settings: ReplicationSettings, way: Direction, guard, sources, dry_run: bool
) -> ReplicationReport:
    return replicate_checkpoints(
        way.source,
        way.destination,
        sources,
        rpo_target=settings.rpo_target,
        dry_run=dry_run,
        guard=guard,
        also=settings.also_copied(way.source_role),  # the pre-failure loss log, from the primary
        # the standby, listed once: each copy starts from it, retention reads what they left
        destination_found=discover(way.destination, settings.layout),
    )


@task(cache_policy=NO_CACHE)
def bucket_progress(
    settings: ReplicationSettings, way: Direction, sources, lag_log, dry_run
) -> ReplicationReport:
    """The bucket copies (`replication: s3-crr`): its progress, nothing copied."""
    return bucket_pass(
        way.source,
        sources,
        rpo_target=settings.rpo_target,
        lag_log=LagLog(lag_log or default_lag_log(settings.runbook)),
        now=datetime.now(UTC),
        dry_run=dry_run,
    )


@task(cache_policy=NO_CACHE)
def record_lag(runbook: str, report: ReplicationReport, lag_log: str | None) -> int:
    LagLog(lag_log or default_lag_log(runbook)).append(report.lags)
    for lag in report.exceeded:
        emit_event(
            event=LAG_EVENT,
            resource={"prefect.resource.id": f"lifeboat.runbook.{runbook}", "prefect.resource.name": runbook},
            payload=lag.to_dict(),
        )
    return len(report.exceeded)


@task(cache_policy=NO_CACHE)
def trim_standby(
    settings: ReplicationSettings, way: Direction, protect: list[str], dry_run: bool, standby_found=None
):
    return retention_for(
        way.destination,
        way.source,
        runbook=settings.runbook,
        layout=settings.layout,
        policy=settings.retention,
        protect=protect,
        dry_run=dry_run,
        secondary_found=standby_found,
        sites=way.sites,
        planned=way.state,  # a fence since the pass chose its direction: nothing is deleted
    )


@flow(name="replicate", log_prints=True)
def replicate(
    runbook: str,
    dry_run: bool = False,
    retention_only: bool = False,
    protect: list[str] | None = None,
    lag_log: str | None = None,
) -> dict:
    """Replicate a runbook's checkpoints from its active site to the standby, then apply
    retention there. Where the bucket replicates (`replication: s3-crr`), primary to
    secondary is its rule's: the pass copies nothing that way and records its lag; one
    dual-region bucket (`gcs-dual-region`) is both sites' store: nothing is copied or deleted.
    The site state decides the direction: after a failover, secondary to
    primary; a source that stops being active mid-run stops the copy. One pass of a runbook
    at a time (its replication lock in the secondary's store): a second one changes nothing.

    Args:
        runbook: Path of the runbook YAML on the worker.
        dry_run: List what would be copied and deleted; change nothing.
        retention_only: Skip copying; only apply the retention policy.
        protect: Checkpoint prefixes retention must keep, besides the newest certified one and
            those in-progress failovers resume from (found in the RTO ledger).
        lag_log: Where to append the per-checkpoint replication lag (JSON lines).
    """
    from prefect.runtime import flow_run

    from lifeboat_dr.core.lock import one_replication_pass

    rb = load_runbook(runbook)
    if rb.replication == "gcs-dual-region":
        print(one_bucket(rb))
        return {"runbook": rb.name, "skipped": one_bucket(rb)}
    primary, secondary = open_sites(rb)
    try:
        with one_replication_pass(secondary, rb.name, str(flow_run.id or "local"), dry_run=dry_run):
            return _one_pass(rb, primary, secondary, dry_run, retention_only, protect, lag_log)
    except StandDown as e:  # another pass of this runbook is running: this one changes nothing
        print(e)
        return {"runbook": rb.name, "skipped": str(e)}


def _one_pass(rb, primary, secondary, dry_run, retention_only, protect, lag_log) -> dict:
    settings = replication_settings(rb)
    way = find_direction(settings, primary, secondary, dry_run, open_witness(rb))
    guard = way.guard(rb.name)
    print(f"{way.state.describe()}: replicating {way.source.uri} -> {way.destination.uri}")
    summary: dict = {
        "runbook": rb.name,
        "from": way.source_role,
        "copied_bytes": 0,
        "failed": {},
        "lag_exceeded": 0,
    }
    standby_found = None
    if not retention_only and rb.replication == "s3-crr" and way.source_role == "primary":
        report = bucket_progress(settings, way, find_sources(settings, way), lag_log, dry_run)
        summary.update(failed=report.failed)
        if not dry_run:
            summary["lag_exceeded"] = record_lag(rb.name, report, lag_log)
    elif not retention_only:
        report = copy_checkpoints(settings, way, guard, find_sources(settings, way), dry_run)
        summary.update(copied_bytes=report.bytes_copied, failed=report.failed)
        standby_found = report.destination_found
        if not dry_run:
            summary["lag_exceeded"] = record_lag(rb.name, report, lag_log)
    retention = trim_standby(settings, way, protect or [], dry_run, standby_found)
    summary["deleted"] = retention.deleted
    for refusal in retention.refused.values():  # left in place, named once each
        print(f"REFUSED {refusal}")
    if retention.paused:
        print(retention.paused)
        summary["retention_paused"] = retention.paused
    create_markdown_artifact(key=f"replicate-{rb.name}", markdown=_markdown(summary, dry_run))
    if summary["failed"]:  # after lag and retention: the run fails visibly, a rerun resumes
        raise ProviderUnavailable(f"checkpoints not replicated: {', '.join(summary['failed'])}")
    return summary


def _markdown(summary: dict, dry_run: bool) -> str:
    lines = [f"# Replication of `{summary['runbook']}`{' (dry run)' if dry_run else ''}", ""]
    lines.append(f"- bytes copied: {summary['copied_bytes']}")
    lines.append(f"- replicas over the RPO target: {summary['lag_exceeded']}")
    lines += [f"- FAILED `{p}`: {e}" for p, e in summary["failed"].items()]
    lines += [f"- {'would delete' if dry_run else 'deleted'} `{p}`" for p in summary["deleted"]]
    return "\n".join(lines) + "\n"
