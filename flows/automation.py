"""The failover automation, as prefect.yaml declares it, for code that deploys in-process.

`prefect deploy` reads prefect.yaml itself; tests, benchmarks and `flow.serve()` setups
use `failover_triggers()` so they run the very trigger that production runs.
"""

from __future__ import annotations

from lifeboat_dr.flows.deploy import shipped_template


def failover_triggers(deployment: str = "failover") -> list:
    """The `triggers:` of `deployment` in the shipped prefect.yaml, as `DeploymentEventTrigger`s."""
    from prefect.events import DeploymentEventTrigger

    for entry in shipped_template().get("deployments", []):
        if entry.get("name") == deployment:
            return [DeploymentEventTrigger(**t) for t in entry.get("triggers", [])]
    raise LookupError(f"prefect.yaml: no deployment named {deployment!r}")
