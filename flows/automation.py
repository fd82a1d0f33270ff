"""The failover automation, as prefect.yaml declares it, for code that deploys in-process.

`prefect deploy` reads prefect.yaml itself; tests, benchmarks and `flow.serve()` setups
use `failover_triggers()` so they run the very trigger that production runs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

PREFECT_YAML = Path(__file__).resolve().parent.parent / "prefect.yaml"


def failover_triggers(prefect_yaml: str | Path = PREFECT_YAML, deployment: str = "failover") -> list:
    """The `triggers:` of `deployment` in prefect.yaml, as `DeploymentEventTrigger`s."""
    from prefect.events import DeploymentEventTrigger

    doc = yaml.safe_load(Path(prefect_yaml).read_text())
    for entry in doc.get("deployments", []):
        if entry.get("name") == deployment:
            return [DeploymentEventTrigger(**t) for t in entry.get("triggers", [])]
    raise LookupError(f"{prefect_yaml}: no deployment named {deployment!r}")
