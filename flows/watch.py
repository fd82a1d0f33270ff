"""The `watch` flow: run a runbook's probes, let the quorum decide, emit outage events.

Scheduled (prefect.yaml, every minute). Each run reads the runbook's signals, records the
readings in the runbook's signal log (shared with `lifeboat serve`, which adds alerts),
and emits `lifeboat.outage.suspected` / `.confirmed` / `.recovered` when the decision
changes. `lifeboat.outage.confirmed` is what the failover automation waits for.

Where it runs matters for one signal: `gpu_health` asks NVML on the worker's own host, so
deploy a watch to a work pool on the GPU nodes, or leave GPU health to DCGM exporter alerts
labelled `lifeboat_signal=gpu_health` through `lifeboat serve`. A host without a driver
reads `unknown` and does not vote.

`build_probes` is the composition root: plain Python, tested without Prefect.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from prefect import flow, get_run_logger, task

from lifeboat.detection.events import emit, outage_event
from lifeboat.detection.log import SignalLog
from lifeboat.detection.probes import (
    CheckpointFreshnessProbe,
    GpuHealthReadingProbe,
    Probe,
    TrainingProgressProbe,
    file_heartbeat,
    store_heartbeat,
)
from lifeboat.detection.provider import ProviderProbe
from lifeboat.detection.quorum import QuorumPolicy
from lifeboat.detection.signals import Reading


def build_probes(rb, *, xid_wait_ms: int | None = 0) -> list[Probe]:
    """One probe per signal the runbook lists (alerts arrive through `lifeboat serve`)."""
    from providers.health.control_plane import StoreControlPlane
    from providers.health.nvml import NvmlHealth
    from providers.storage import open_site

    signals = {str(getattr(s, "value", s)) for s in rb.detection.signals}
    probes: list[Probe] = []
    primary = None
    if signals & {"checkpoint_freshness", "provider"}:
        # a probe must read "failing" in seconds, not wait out the store's default deadline
        primary = open_site(rb, rb.primary, deadline_s=probe_deadline())
    if "gpu_health" in signals:
        probes.append(GpuHealthReadingProbe(NvmlHealth(xid_wait_ms=xid_wait_ms)))
    if "training_progress" in signals and rb.detection.heartbeat:
        probes.append(
            TrainingProgressProbe(
                _heartbeat_reader(rb), rb.detection.stall_after, source=f"heartbeat:{rb.detection.heartbeat}"
            )
        )
    if "checkpoint_freshness" in signals:

        def newest():
            return max((o.updated for o in primary.list()), default=None)

        probes.append(
            CheckpointFreshnessProbe(
                newest, rb.checkpoint.cadence, rb.checkpoint.freshness_factor, source=primary.uri
            )
        )
    if "provider" in signals:
        probes.append(ProviderProbe(StoreControlPlane(primary)))
    return probes


def probe_deadline() -> float:
    """Seconds one probe call may wait on an unanswering store (`LIFEBOAT_PROBE_DEADLINE`, 2 s):
    the provider probe pings three times, so a dead region reads failing in about 6 s."""
    from providers.storage.base import store_deadline

    return store_deadline(float(os.environ.get("LIFEBOAT_PROBE_DEADLINE", "2")))


def _heartbeat_reader(rb):
    from providers.storage import open_store

    where = rb.detection.heartbeat
    if urlparse(where).scheme in ("s3", "gs", "file"):
        parent, _, key = rb.store_uri(where).rstrip("/").rpartition("/")
        return store_heartbeat(open_store(parent, endpoint_url=rb.primary.endpoint_url), key)
    return file_heartbeat(rb.resolve(where))


@task
def run_probe(probe: Probe, previous: Reading | None) -> Reading:
    return probe.check(previous)


@flow(name="watch", log_prints=True)
def watch(runbook: str, xid_wait_ms: int = 0) -> dict:
    """Probe `runbook`'s signals once and emit an outage event if the decision changed.

    Args:
        runbook: Path of the runbook YAML on the worker.
        xid_wait_ms: How long to listen for GPU XID events (0: only what is already queued).
    """
    from runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    log = SignalLog(rb.name)
    readings = [run_probe(p, log.latest(p.source)) for p in build_probes(rb, xid_wait_ms=xid_wait_ms)]
    decision = log.observe(readings, QuorumPolicy.from_detection(rb.detection))
    logger = get_run_logger()
    for r in readings:
        logger.info("%s %s: %s", r.signal, r.status, r.summary)
    logger.info("%s", decision.summary)
    spec = outage_event(decision, rb.name, runbook)
    if spec:
        emit(spec)
    return decision.to_dict()
