"""What Alertmanager sends a Lifeboat receiver when one runbook's cluster fails, and a local
runbook that listens for it. Shared by the topology test (tests/topology/) and the alert
latency benchmarks (benchmarks/alert_latency.py, topology_latency.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from tests.runbook_yaml import two_site_runbook


def alerting_runbook(folder: Path, name: str) -> Path:
    """A local runbook whose outage is confirmed by 2 of (gpu_health, alertmanager) in 5 min."""
    path = folder / f"{name}.yaml"
    path.write_text(
        two_site_runbook(
            name,
            job="echo resumed",
            detection={"signals": ["gpu_health", "alertmanager"], "quorum": 2, "window": "5m"},
        )
    )
    return path


def firing_group(runbook: str, alertname: str, signal: str | None = None) -> dict:
    """One firing alert group (Alertmanager `group_by: [alertname]`) naming `runbook`, as a
    webhook body; `signal` sets the alert's `lifeboat_signal` label."""
    labels = {"alertname": alertname, "lifeboat_runbook": runbook}
    if signal:
        labels["lifeboat_signal"] = signal
    alert = {
        "status": "firing",
        "labels": labels,
        "annotations": {},
        "startsAt": datetime.now(UTC).isoformat(),
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": uuid.uuid4().hex[:16],
    }
    return {
        "version": "4",
        "groupKey": f"{{}}:{{alertname={alertname!r},runbook={runbook!r}}}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "lifeboat",
        "alerts": [alert],
    }


def two_sources(runbook: str) -> list[dict]:
    """Two alert groups, hence two independent sources, of two signals: together they
    confirm `alerting_runbook`'s outage, either alone only suspects it."""
    return [firing_group(runbook, "DCGMXidCritical", "gpu_health"), firing_group(runbook, "NodeNotReady")]
