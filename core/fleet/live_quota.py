"""The declared quota, capped by the cloud's live quota where it gives one.

A runbook declares its secondary's GPU quota (`fleet.quota`); the cloud may allow less today (a
limit never raised, or lowered). AWS counts its GPU quota in vCPUs per region and instance
family (Service Quotas: "Running On-Demand P instances", one pool for every P type, H100 and
A100 alike), so a place's GPUs cost `vcpus_per_gpu` of its pool, and whole instances only.

The cap only ever lowers: a pool whose declared GPUs fit its live vCPUs is planned as declared;
one they overflow has every place in it scaled down by the same share, rounded down to whole
instances, so together they never take more vCPUs than the pool has. A pool whose live quota
is unknown (the SDK gives none, no permission, no answer) is planned as declared, and said.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from lifeboat_dr.core.fleet.plan import Place


class GpuShape(Protocol):
    """What one GPU of a place costs of its live pool (`providers/compute/service_quotas.py`)."""

    pool: str  # the live quota's name: `aws/us-west-2 L-417A185B`
    vcpus_per_gpu: float
    gpus_per_instance: int


@dataclass(frozen=True)
class Unknown:
    """A pool whose live quota could not be read, and why."""

    why: str


def capped(
    quota: Mapping[Place, int], shapes: Mapping[Place, GpuShape], live: Mapping[str, float | Unknown]
) -> tuple[dict[Place, int], list[str]]:
    """(quota capped by the live pools, one line per pool read). Places without a shape, or
    whose pool is not in `live`, keep their declared GPUs."""
    out = dict(quota)
    lines = []
    pools: dict[str, list[Place]] = {}
    for place in sorted(quota):
        if place in shapes and shapes[place].pool in live:
            pools.setdefault(shapes[place].pool, []).append(place)
    for pool, places in pools.items():
        said = live[pool]
        declared = ", ".join(f"{quota[p]} {p.accelerator}" for p in places)
        if not isinstance(said, Unknown) and not 0 <= said < math.inf:  # NaN, negative: no quota at all
            said = Unknown(f"the service said {said!r} vCPUs")
        if isinstance(said, Unknown):
            lines.append(f"{pool}: live quota unknown ({said.why}); planning on the declared {declared}")
            continue
        wanted = sum(quota[p] * Fraction(shapes[p].vcpus_per_gpu) for p in places)
        if wanted <= Fraction(said):
            lines.append(f"{pool}: live quota {said:g} vCPUs covers the declared {declared}")
            continue
        share = Fraction(said) / wanted  # exact: rounding never lets the pool overflow
        for p in places:
            per = shapes[p].gpus_per_instance
            out[p] = math.floor(quota[p] * share / per) * per
        now = ", ".join(f"{out[p]} {p.accelerator}" for p in places)
        lines.append(
            f"{pool}: live quota {said:g} vCPUs is less than the declared {declared} "
            f"({float(wanted):g} vCPUs); planning on {now}"
        )
    return out, lines
