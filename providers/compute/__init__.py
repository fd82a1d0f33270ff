"""Compute backends: `open_compute(name)` picks one by name.

`local` runs the job as a local process group (demo, CI); `skypilot` provisions clouds
through SkyPilot; `fake` scripts capacity errors, slow boots and preemption for tests.
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


def compute_for_runbook(rb, *, live: bool | None = None, state_dir=None, **kwargs: Any) -> Compute:
    """The backend a runbook's secondary needs: `local` runs job.command as a process group
    (state under `state_dir`, default `<runbook dir>/.lifeboat/clusters`); anything else is
    SkyPilot with the job's task YAML, priced over the catalog `plan.catalog` chooses
    (`live` overrides it: True live, False the shipped snapshot), as a managed job when
    `job.managed` says so."""
    if rb.secondary.infra == "local":
        from lifeboat_dr.providers.compute.local import LocalCompute

        return LocalCompute(state_dir or rb.base_dir / ".lifeboat" / "clusters")
    from lifeboat_dr.providers.compute.skycatalog import choose_catalog
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute, task_nodes

    setting = rb.plan.catalog if live is None else ("live" if live else "snapshot")
    catalog = choose_catalog(setting)
    task = rb.resolve(rb.job.task)
    kwargs.setdefault("store_uri", rb.store_uri(rb.secondary.store))
    kwargs.setdefault("primary_store_uri", rb.store_uri(rb.primary.store))
    kwargs.setdefault("price_source", catalog.describe())
    if rb.job.managed is not None:
        kwargs.setdefault("managed", True)
        kwargs.setdefault("job_recovery", rb.job.managed.job_recovery())
    return SkyPilotCompute(
        offline=catalog.kind == "snapshot", task_yaml=task, num_nodes=task_nodes(task), **kwargs
    )


__all__ = [*sorted(_FROM_BASE), "compute_for_runbook", "open_compute"]
