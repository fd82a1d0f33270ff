"""The automations, as prefect.yaml declares them, for code that deploys in-process.

`prefect deploy` reads prefect.yaml itself; tests, benchmarks and `flow.serve()` setups
use `failover_triggers()` / `recover_triggers()` so they run the very triggers that production runs.
"""

from __future__ import annotations

from lifeboat_dr.flows.deploy import RunbookTarget, for_runbook, shipped_template


def failover_triggers(deployment: str = "failover") -> list:
    """The `triggers:` of `deployment` in the shipped prefect.yaml, as `DeploymentEventTrigger`s."""
    from prefect.events import DeploymentEventTrigger

    for entry in shipped_template().get("deployments", []):
        if entry.get("name") == deployment:
            return [DeploymentEventTrigger(**t) for t in entry.get("triggers", [])]
    raise LookupError(f"prefect.yaml: no deployment named {deployment!r}")


def recover_triggers(target: RunbookTarget) -> list:
    """The `recover` deployment's `triggers:` for one runbook, as `lifeboat deploy` writes them."""
    from prefect.events import DeploymentEventTrigger

    entry = next(e for e in shipped_template()["deployments"] if e.get("name") == "recover")
    return [DeploymentEventTrigger(**t) for t in for_runbook(entry, target).get("triggers", [])]
