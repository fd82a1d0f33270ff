"""The `loss_log` flow: the pre-failure loss log to the secondary, a few times per checkpoint
interval (issue #34; core/replication/losslog.py).

Thin on purpose: one `ship_loss_log` pass from the primary store to the secondary's, guarded
by the site state (the primary must be the active site; an unknown site state copies nothing
and fails the run). No replication lock: the pass writes one object and its record, whole lines
each time, so two passes at once leave a valid copy either way.
"""

from __future__ import annotations

from prefect import flow

from lifeboat_dr.core.replication.losslog import primary_is_active, ship_loss_log
from lifeboat_dr.core.sitestate import RolesFlipped, site_stores
from lifeboat_dr.flows.wiring import loss_log_key, open_sites, open_witness
from lifeboat_dr.runbooks.loader import load_runbook


@flow(name="loss_log", log_prints=True)
def loss_log(runbook: str) -> dict:
    """Copy the runbook's loss log (kept in the primary store) to the secondary when it grew:
    its newest whole lines, a bounded number of bytes a pass.

    Args:
        runbook: Path of the runbook YAML on the worker.
    """
    rb = load_runbook(runbook)
    key = loss_log_key(rb)
    if key is None:
        print(f"{rb.name}: verify.loss_log is not in the primary store: nothing to ship")
        return {"runbook": rb.name, "skipped": "no loss log in the primary store"}
    primary, secondary = open_sites(rb)
    guard = primary_is_active(site_stores(primary, secondary, open_witness(rb)), rb.name)
    try:
        done = ship_loss_log(primary, secondary, key, guard=guard)
    except RolesFlipped as e:  # after a failover: the secondary's copy is the log the proof reads
        print(e)
        return {"runbook": rb.name, "skipped": str(e)}
    print(f"{rb.name}: {key}: " + (done.unchanged or f"copied {done.copied_bytes} bytes"))
    return {"runbook": rb.name, "copied_bytes": done.copied_bytes, "requests": done.requests}
