"""Compute backends: `open_compute(name)` picks one by name.

`local` runs the job as a local process group (demo, CI); `skypilot` provisions clouds
through SkyPilot; `fake` scripts capacity errors, slow boots and preemption for tests.
"""

from __future__ import annotations

import importlib
from typing import Any

from lifeboat.errors import ConfigError
from providers.compute.base import (
    CapacityError,
    ClusterState,
    ClusterStatus,
    Compute,
    JobSpec,
    JobState,
    LaunchAttempt,
    LaunchResult,
    PlanOption,
)

_BACKENDS = {
    "local": "providers.compute.local:LocalCompute",
    "skypilot": "providers.compute.skypilot:SkyPilotCompute",
    "fake": "providers.compute.fake:FakeCompute",
}


def open_compute(name: str, **kwargs: Any) -> Compute:
    """Build the named backend; an unknown name lists the valid ones."""
    if name not in _BACKENDS:
        raise ConfigError(f"unknown compute backend {name!r}; use one of {', '.join(sorted(_BACKENDS))}")
    module, _, cls = _BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


def compute_for_runbook(rb, *, live: bool = False, state_dir=None, **kwargs: Any) -> Compute:
    """The backend a runbook's secondary needs: `local` runs job.command as a process group
    (state under `state_dir`, default `<runbook dir>/.lifeboat/clusters`); anything else is
    SkyPilot with the job's task YAML (offline catalog unless `live`)."""
    if rb.secondary.infra == "local":
        from providers.compute.local import LocalCompute

        return LocalCompute(state_dir or rb.base_dir / ".lifeboat" / "clusters")
    from providers.compute.skypilot import SkyPilotCompute, task_nodes

    task = rb.resolve(rb.job.task)
    kwargs.setdefault("store_uri", rb.store_uri(rb.secondary.store))
    return SkyPilotCompute(offline=not live, task_yaml=task, num_nodes=task_nodes(task), **kwargs)


__all__ = [
    "CapacityError",
    "ClusterState",
    "ClusterStatus",
    "Compute",
    "JobSpec",
    "JobState",
    "LaunchAttempt",
    "LaunchResult",
    "PlanOption",
    "compute_for_runbook",
    "open_compute",
]
