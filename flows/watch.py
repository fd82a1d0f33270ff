"""The `watch` flow: run a runbook's probes, let the quorum decide, emit outage events.

Scheduled (prefect.yaml: every minute at most, at the period the runbook's RTO needs,
`lifeboat_dr.core.cadences`). Each run reads the runbook's signals, records the
readings in the runbook's signal log (shared with `lifeboat serve`, which adds alerts),
and emits `lifeboat.outage.suspected` / `.confirmed` / `.recovered` when the decision
changes. `lifeboat.outage.confirmed` is what the failover automation waits for. Each GPU
XID NVML reported is also a `lifeboat.training.fault` event (kind `xid`), the training
guard's event for the faults it sees from inside the job.

Where it runs matters for one signal: `gpu_health` asks NVML on the worker's own host, so
deploy a watch to a work pool on the GPU nodes, or leave GPU health to DCGM exporter alerts
labelled `lifeboat_signal=gpu_health` through `lifeboat serve`. A host without a driver
reads `unknown` and does not vote.

The probes come from the composition root, `lifeboat_dr.flows.wiring.build_probes`.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task

from lifeboat_dr.core.detection.events import outage_event, xid_fault_events
from lifeboat_dr.core.detection.probes import Probe
from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.detection.shared_state import open_signal_log
from lifeboat_dr.core.detection.signals import Reading
from lifeboat_dr.providers.orchestrator.prefect_api import emit_spec as emit


@task
def run_probe(probe: Probe, previous: Reading | None) -> Reading:
    return probe.check(previous)


@flow(name="watch", log_prints=True)
def watch(runbook: str, xid_wait_ms: int = 0, vantage: str | None = None) -> dict:
    """Probe `runbook`'s signals once and emit an outage event if the decision changed.

    Args:
        runbook: Path of the runbook YAML on the worker.
        xid_wait_ms: How long to listen for GPU XID events (0: only what is already queued).
        vantage: Where this watch runs (`control-plane`, `secondary`). Watches with a vantage
            that share one signal state (`LIFEBOAT_STATE_DIR`) are folded by vantage: a primary
            unreachable from one of them does not vote, from two it does.
    """
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    decision, readings = tick(rb, open_signal_log(rb.name), xid_wait_ms=xid_wait_ms, vantage=vantage)
    for spec in xid_fault_events(readings, rb.name, runbook):
        emit(spec)
    spec = outage_event(decision, rb.name, runbook)
    if spec:
        emit(spec)
    return decision.to_dict()


def observe(rb, log, *, xid_wait_ms: int = 0, vantage: str | None = None):
    """One tick of the watch: `rb`'s probes (a task run each) into `log` and the quorum's
    decision, logged; emits nothing (the serving-rto drill ticks it on a sandbox's own log)."""
    return tick(rb, log, xid_wait_ms=xid_wait_ms, vantage=vantage)[0]


def tick(rb, log, *, xid_wait_ms: int = 0, vantage: str | None = None):
    """`observe`, with the readings behind the decision."""
    from lifeboat_dr.flows.wiring import build_probes

    readings = [
        run_probe(p, log.latest(p.source)) for p in build_probes(rb, xid_wait_ms=xid_wait_ms, vantage=vantage)
    ]
    decision = log.observe(readings, QuorumPolicy.from_detection(rb.detection))
    logger = get_run_logger()
    for r in readings:
        logger.info("%s %s: %s", r.signal, r.status, r.summary)
    logger.info("%s", decision.summary)
    return decision, readings
