"""Compute backends: `open_compute(name)` picks one by name.

`local` runs the job as a local process group (demo, CI); `skypilot` provisions clouds
through SkyPilot; `fake` scripts capacity errors, slow boots and preemption for tests.
A runbook's backend is built by `lifeboat_dr.flows.wiring.compute_for`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lifeboat_dr.kernel.errors import ConfigError

if TYPE_CHECKING:
    from lifeboat_dr.providers.compute.base import Compute

# The interface's names, re-exported from `base` when first asked for: `lifeboat validate`
# imports `lifeboat_dr.providers.compute.skycheck` and needs none of them.
_FROM_BASE = frozenset(
    {
        "CapacityError",
        "ClusterState",
        "ClusterStatus",
        "Compute",
        "JobSpec",
        "JobState",
        "LaunchAttempt",
        "LaunchResult",
        "PlanOption",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FROM_BASE:
        from lifeboat_dr.providers.compute import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_BACKENDS = {
    "local": "lifeboat_dr.providers.compute.local:LocalCompute",
    "skypilot": "lifeboat_dr.providers.compute.skypilot:SkyPilotCompute",
    "fake": "lifeboat_dr.providers.compute.fake:FakeCompute",
}


def open_compute(name: str, **kwargs: Any) -> Compute:
    """Build the named backend; an unknown name lists the valid ones."""
    if name not in _BACKENDS:
        raise ConfigError(f"unknown compute backend {name!r}; use one of {', '.join(sorted(_BACKENDS))}")
    module, _, cls = _BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


__all__ = [*sorted(_FROM_BASE), "open_compute"]
