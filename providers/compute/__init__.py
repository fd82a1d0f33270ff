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
    "open_compute",
]
