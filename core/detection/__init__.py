"""Outage detection: probes turn observations into readings, the quorum decides.

Pure core: no Prefect, no SDK. `signals` (Reading), `probes` (training progress,
checkpoint freshness, GPU health), `provider` (control plane), `alerts` (Alertmanager
payloads), `quorum` (decide), `log` (the per-runbook signal log), `events` (decisions
as Prefect events).
"""

from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Reading, Status

__all__ = ["OutageDecision", "OutageState", "QuorumPolicy", "Reading", "Status", "decide"]
