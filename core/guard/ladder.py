"""The recovery ladder: which rungs can help a fault, and which one comes next.

Plain functions over names (no runbook, no provider). The rungs, smallest first:

    rung                    what it does                          helps when
    ----------------------  ------------------------------------  -----------------------------
    restart                 the job again on the same cluster     nccl, timeout, hang, cuda OOM
    relaunch-without-node   a fresh cluster, same infra           a poisoned device, a bad node
    other-zone              a fresh cluster in another zone       a zone outage
    failover                the failover flow (secondary site)    a region or provider outage

Where a fault starts on the ladder (`first_rung`): a region or provider outage starts at
failover, a zone outage at other-zone, a CUDA error that poisoned the device
(`faults.poisons_device`: any but an out-of-memory one) or a critical XID the watch read at
relaunch-without-node, anything else (nccl, timeout, hang, out-of-memory, an application's
XID) at restart. The policy's rungs
below that start are skipped; the rest are walked in the policy's order, each next one when
the last failed (`next_rung`). No rung is tried twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RUNGS = ("restart", "relaunch-without-node", "other-zone", "failover")
SCOPES = ("node", "zone", "region", "provider")  # how wide the outage is, from detection
ENDED = ("completed", "failed", "rejected", "stood-down")  # a rung's outcome once it ran
STOPS = ("completed", "rejected", "stood-down")  # no rung after these: done, a no, a live job


@dataclass(frozen=True)
class FaultSeen:
    """A fault as the ladder reads it: the guard's event and what detection says of its scope."""

    kind: str | None  # the guard's kind (nccl, cuda, timeout, hang); None: no guard event
    scope: str = "node"  # one of SCOPES: node (this job's machines), zone, region, provider
    poisoned: bool = False  # a CUDA error left the device unusable: an in-place restart cannot help
    host: str = ""  # the node at fault (the event's host), recorded by relaunch-without-node
    rank: int | None = None
    step: int | None = None
    zone: str = ""  # the failed cluster's cloud/region/zone, when known: other-zone skips it

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"scope {self.scope!r}: one of {', '.join(SCOPES)}")


def fault_from_event(payload: Mapping, scope: str = "node", zone: str = "") -> FaultSeen:
    """The `lifeboat.training.fault` event's payload as the ladder reads it. A CUDA error is
    poisoning unless its detail names an out-of-memory error (`faults.one_line` puts the
    exception's class first); a watch's XID event is poisoning when the XID is a critical one
    (`providers.health.CRITICAL_XIDS`: fallen off the bus, a double-bit error, ...)."""
    kind = payload.get("kind")
    detail = str(payload.get("detail") or "")
    return FaultSeen(
        kind=kind if isinstance(kind, str) else None,
        scope=scope,
        poisoned=(kind == "cuda" and not detail.startswith("OutOfMemoryError"))
        or (kind == "xid" and payload.get("critical") is True),
        host=str(payload.get("host") or "")[:200],  # a line in the ledger, not a document
        rank=payload.get("rank") if isinstance(payload.get("rank"), int) else None,
        step=payload.get("step") if isinstance(payload.get("step"), int) else None,
        zone=zone,
    )


def first_rung(fault: FaultSeen) -> str:
    """The smallest rung that can help `fault` (see the module docstring)."""
    if fault.scope in ("region", "provider"):
        return "failover"
    if fault.scope == "zone":
        return "other-zone"
    if fault.kind is None or fault.poisoned:
        return "relaunch-without-node"
    return "restart"


def rungs_for(policy: Sequence[str], fault: FaultSeen) -> list[str]:
    """The policy's rungs that can help `fault`, in the policy's order: those below its
    first rung skipped. Empty: none can (a zone outage and a ladder of restart alone)."""
    if unknown := [r for r in policy if r not in RUNGS]:
        raise ValueError(f"unknown rung(s) {', '.join(unknown)}; rungs are {', '.join(RUNGS)}")
    floor = RUNGS.index(first_rung(fault))
    return [r for r in policy if RUNGS.index(r) >= floor]


def next_rung(plan: Sequence[str], outcomes: Mapping[str, str]) -> str | None:
    """The rung to try now, given each tried rung's outcome: None when one completed, a
    person rejected one (no larger action after a no), one stood down (the job it was to
    recover is running: no action on a live job), or every rung of `plan` has ended."""
    if any(outcomes.get(r) in STOPS for r in plan):
        return None
    return next((r for r in plan if outcomes.get(r) not in ENDED), None)
