"""Outage decisions as Prefect events: `lifeboat.outage.{suspected,confirmed,recovered}`;
and each GPU XID a watch read, as the training guard's `lifeboat.training.fault` (kind `xid`).

The runbook is the event's resource (`lifeboat.runbook.<name>`, with its path as a label
the failover automation passes on). The payload carries `evidence` (one line per reading,
the failover flow's parameter) and `decision` (the whole decision, readings included). Event ids are stable per outage episode, so a decision emitted twice (two
receivers, a retry) is stored once by the server. `lifeboat_dr.providers.orchestrator.prefect_api.emit` sends them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState
from lifeboat_dr.core.detection.signals import Reading, iso
from lifeboat_dr.core.guard.loop import EVENT as FAULT_EVENT
from lifeboat_dr.core.guard.loop import EVENT_NAMESPACE
from lifeboat_dr.providers.health import CRITICAL_XIDS

RESOURCE_PREFIX = "lifeboat.runbook."
PATH_LABEL = "lifeboat.runbook.path"
EVENT_FOR_STATE = {
    OutageState.suspected: "lifeboat.outage.suspected",
    OutageState.confirmed: "lifeboat.outage.confirmed",
    OutageState.healthy: "lifeboat.outage.recovered",
}


@dataclass(frozen=True)
class EventSpec:
    event: str
    resource: dict[str, str]
    payload: dict[str, Any]
    id: uuid.UUID
    occurred: datetime | None = None
    related: list[dict[str, str]] = field(default_factory=list)


def runbook_resource(name: str, path: str | None) -> dict[str, str]:
    resource = {"prefect.resource.id": f"{RESOURCE_PREFIX}{name}", "prefect.resource.name": name}
    if path:
        resource[PATH_LABEL] = str(path)
    return resource


def evidence_lines(decision: OutageDecision) -> list[str]:
    """One line per reading behind the decision, for the approval card and the ledger."""
    lines = [f"{r.signal}: {r.summary} ({r.source}, {iso(r.at)})" for r in decision.evidence]
    lines += [f"{signal}: ignored, {why}" for signal, why in decision.ignored]
    return lines


def outage_event(decision: OutageDecision, name: str, path: str | None) -> EventSpec | None:
    """The event for a decision that changed state; None when nothing changed."""
    if not decision.changed:
        return None
    payload = {
        "runbook": str(path or name),
        "state": decision.state.value,
        "summary": decision.summary,
        "outage_started_at": iso(decision.outage_started_at),
        "evidence": evidence_lines(decision),  # the failover flow's `evidence` parameter
        "decision": decision.to_dict(),  # everything, readings included
    }
    return EventSpec(
        EVENT_FOR_STATE[decision.state],
        runbook_resource(name, path),
        payload,
        decision.episode_id(name),
        decision.at,
    )


def xid_fault_events(readings: list[Reading], name: str, path: str | None) -> list[EventSpec]:
    """One `lifeboat.training.fault` event per XID in the watch's GPU-health readings, named
    as the training guard names its faults (kind `xid`, with the XID, GPU and host; rank and
    step unknown from outside the job). NVML hands each XID out once, so a reading's XIDs are
    new; the id (runbook, host, GPU, XID, reading time) stores a re-emitted reading once."""
    specs = []
    for r in readings:
        if r.signal != "gpu_health":
            continue
        host = str(r.evidence.get("host") or r.source.partition("@")[2])
        for gpu, xid in r.evidence.get("xids") or ():
            meaning = CRITICAL_XIDS.get(xid, "not in the critical list: usually the application's own fault")
            payload = {
                "kind": "xid",
                "xid": xid,
                "gpu": gpu,
                "critical": xid in CRITICAL_XIDS,
                "rank": None,
                "host": host,
                "step": None,
                "detail": f"XID {xid} on GPU {gpu} of {host}: {meaning}",
                "runbook": str(path or name),
                "reported_by": r.source,
            }
            resource = {
                **runbook_resource(name, path),
                "lifeboat.runbook": name,  # as the guard's events: what the recover automation matches
                "lifeboat.fault": "xid",
                "lifeboat.xid": str(xid),
                "lifeboat.host": host,
                "lifeboat.critical": str(xid in CRITICAL_XIDS).lower(),
            }
            key = f"{name}/xid/{host}/{gpu}/{xid}/{iso(r.at)}"
            specs.append(EventSpec(FAULT_EVENT, resource, payload, uuid.uuid5(EVENT_NAMESPACE, key), r.at))
    return specs
