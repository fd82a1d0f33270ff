"""The `replicate` flow: committed checkpoints to the secondary store, lag events, retention.

Thin on purpose: every step is a core function (lifeboat_dr.core.replication, lifeboat_dr.core.retention);
the flow adds scheduling, retries, an artifact and the `lifeboat.replication.lag_exceeded`
event (resource `lifeboat.runbook.<name>`) that an automation can page on.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from lifeboat_dr.core.checkpoints.layouts import discover
from lifeboat_dr.core.replication import (
    LAG_EVENT,
    Direction,
    LagLog,
    ReplicationReport,
    default_lag_log,
    direction,
    loss_log_key,
    replicate_checkpoints,
    retention_for,
    sources_to_replicate,
)
from lifeboat_dr.flows.wiring import open_sites
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.orchestrator.prefect_api import emit as emit_event
from lifeboat_dr.runbooks.loader import load_runbook


@task(cache_policy=NO_CACHE)
def find_direction(rb, primary, secondary, dry_run: bool) -> Direction:
    return direction(rb, primary, secondary, dry_run=dry_run)


@task(cache_policy=NO_CACHE)
def find_sources(rb, way: Direction) -> list:
    return sources_to_replicate(rb, way)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=30)
def copy_checkpoints(rb, way: Direction, guard, sources, dry_run: bool) -> ReplicationReport:
    # the pre-failure loss log travels with the primary's checkpoints
    also = [k for k in [loss_log_key(rb)] if k] if way.source_role == "primary" else []
    return replicate_checkpoints(
        way.source,
        way.destination,
        sources,
        rpo_target=rb.rpo_target,
        dry_run=dry_run,
        guard=guard,
        also=also,
        # the standby, listed once: each copy starts from it, retention reads what they left
        destination_found=discover(way.destination, rb.checkpoint.layout.value),
    )


@task(cache_policy=NO_CACHE)
def record_lag(rb, report: ReplicationReport, lag_log: str | None) -> int:
    LagLog(lag_log or default_lag_log(rb)).append(report.lags)
    for lag in report.exceeded:
        emit_event(
            event=LAG_EVENT,
            resource={"prefect.resource.id": f"lifeboat.runbook.{rb.name}", "prefect.resource.name": rb.name},
            payload=lag.to_dict(),
        )
    return len(report.exceeded)


@task(cache_policy=NO_CACHE)
def trim_standby(rb, way: Direction, protect: list[str], dry_run: bool, standby_found=None):
    return retention_for(
        rb, way.destination, way.source, protect=protect, dry_run=dry_run, secondary_found=standby_found
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
    retention there. The site state decides the direction: after a failover, secondary to
    primary; a source that stops being active mid-run stops the copy.

    Args:
        runbook: Path of the runbook YAML on the worker.
        dry_run: List what would be copied and deleted; change nothing.
        retention_only: Skip copying; only apply the retention policy.
        protect: Checkpoint prefixes retention must keep, besides the newest certified one and
            those in-progress failovers resume from (found in the RTO ledger).
        lag_log: Where to append the per-checkpoint replication lag (JSON lines).
    """
    rb = load_runbook(runbook)
    primary, secondary = open_sites(rb)
    way = find_direction(rb, primary, secondary, dry_run)
    guard = way.guard(rb.name, {"primary": primary, "secondary": secondary})
    print(f"{way.state.describe()}: replicating {way.source.uri} -> {way.destination.uri}")
    summary: dict = {
        "runbook": rb.name,
        "from": way.source_role,
        "copied_bytes": 0,
        "failed": {},
        "lag_exceeded": 0,
    }
    standby_found = None
    if not retention_only:
        report = copy_checkpoints(rb, way, guard, find_sources(rb, way), dry_run)
        summary.update(copied_bytes=report.bytes_copied, failed=report.failed)
        standby_found = report.destination_found
        if not dry_run:
            summary["lag_exceeded"] = record_lag(rb, report, lag_log)
    retention = trim_standby(rb, way, protect or [], dry_run, standby_found)
    summary["deleted"] = retention.deleted
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
