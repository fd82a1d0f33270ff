"""What the fleet plan and `lifeboat capacity` read of each runbook: the composition root's part.

A job's GPUs are its `cluster.gpus`, else its task's `num_nodes` x the GPUs per node of the
task's accelerators (else of its first candidate's). Each candidate is a place (cloud/region)
and a GPU type: its own `accelerators`, else the task's. A runbook whose GPU count or GPU
types cannot be told this way is unsized: listed, never planned on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lifeboat_dr.core.fleet.capacity import (
    CapacityReport,
    DeclaredQuota,
    check_capacity,
    combined_quota,
    fit_warning,
)
from lifeboat_dr.core.fleet.live_quota import Unknown, capped
from lifeboat_dr.core.fleet.plan import FleetJob, Place
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError
from lifeboat_dr.runbooks.model import Workload
from lifeboat_dr.runbooks.skytask import read_task

if TYPE_CHECKING:
    from lifeboat_dr.providers.compute.service_quotas import QuotaSource
    from lifeboat_dr.runbooks.model import Runbook


@dataclass(frozen=True)
class Unsized:
    """A runbook the fleet cannot plan, and why."""

    name: str
    why: str


def place(infra: str, accelerator: str) -> Place:
    return Place(infra.strip("/").lower(), accelerator)


def holds_at(rb: Runbook) -> tuple[str, str]:
    """(failed region, store URI) where the fleet runs of `rb`'s outages keep what they hold
    (`core/fleet/holds.py`): its `fleet.lock_store`, which every worker of the region reads;
    without one, the fleet ledger's folder, which only this worker reads."""
    from lifeboat_dr.core.fleet.group import region_of
    from lifeboat_dr.core.fleet.record import FleetLedger

    region = region_of(rb.primary.infra)
    if rb.fleet.lock_store:
        return region, rb.store_uri(rb.fleet.lock_store)
    return region, f"file://{FleetLedger().path.parent.resolve()}"


def declared_quota(rb: Runbook) -> list[DeclaredQuota]:
    return [DeclaredQuota(rb.name, place(q.infra, q.accelerator), q.gpus) for q in rb.fleet.quota]


def fleet_capacity(
    runbooks: Sequence[Runbook], *, domains: Sequence[str] = (), recovery_s: float | None = None
) -> CapacityReport:
    """`check_capacity` over loaded runbooks: their declared quota (capped by the live one where
    they ask), their jobs, the unsized listed."""
    read = [fleet_job(rb) for rb in runbooks]
    return check_capacity(
        [j for j in read if not isinstance(j, Unsized)],
        [q for rb in runbooks for q in declared_quota(rb)],
        unsized=[(u.name, u.why) for u in read if isinstance(u, Unsized)],
        domains=domains,
        recovery_s=recovery_s,
        live=live_cap(runbooks),
    )


def live_cap(runbooks: Sequence[Runbook], source: QuotaSource | None = None):
    """When any of `runbooks` asks (`fleet.live_quota`): quota -> (quota capped by the cloud's
    live quota, one line per pool read; `core/fleet/live_quota.py`), asking `source` (default:
    AWS Service Quotas, `AWS_ENDPOINT_URL_SERVICE_QUOTAS` honoured). None when none asks."""
    if not any(rb.fleet.live_quota for rb in runbooks):
        return None

    def cap(quota: dict[Place, int]) -> tuple[dict[Place, int], list[str]]:
        from lifeboat_dr.providers.compute.service_quotas import AwsServiceQuotas, aws_shapes

        asking = source or AwsServiceQuotas()
        shapes = {
            place(*at): shape for at, shape in aws_shapes((p.infra, p.accelerator) for p in quota).items()
        }
        pools = {shape.pool: shape for shape in shapes.values()}

        def read(shape) -> float | Unknown:
            try:
                return asking.vcpu_limit(shape.region, shape.code)
            except LifeboatError as e:  # not found, not allowed, no answer: planned as declared
                return Unknown(str(e))

        with ThreadPoolExecutor(max(1, len(pools))) as pool:  # one deadline for all, in an outage
            live = dict(zip(pools, pool.map(read, pools.values()), strict=True))
        return capped(quota, shapes, live)

    return cap


def fit_warnings(rb: Runbook) -> list[str]:
    """`validate`'s word when the runbook declares quota and none of its candidates can hold its
    GPUs (nothing is said without declared quota: the secondary's room is then unknown), and
    when a realtime-inference runbook groups (its failover waits the window first) or a serving
    one names a window (it never groups)."""
    said = []
    if rb.fleet.group_window is not None and rb.serving is not None:
        said.append(
            "fleet.group_window: ignored: a serving runbook moves traffic to its hot standby at once, "
            "it does not group"
        )
    elif rb.fleet.group_window is not None and rb.workload is Workload.realtime_inference:
        said.append(
            f"fleet.group_window: a realtime-inference runbook waits {format_duration(rb.fleet.group_window)} "
            f"to group before it fails over (RTO {format_duration(rb.rto_target)}): consider not grouping it"
        )
    if not rb.fleet.quota:
        return said
    job = fleet_job(rb)
    if isinstance(job, Unsized):
        return [*said, f"fleet.quota: declared, but the job cannot be sized: {job.why}"]
    warning = fit_warning(job, combined_quota(declared_quota(rb))[0])
    return said + ([warning] if warning else [])


def fleet_job(rb: Runbook) -> FleetJob | Unsized:
    """The runbook as the fleet plan sees it, or why it cannot."""
    named = all(c.accelerators for c in rb.secondary.candidates) and rb.cluster is not None
    task = {} if named else _task(rb)  # read only when the runbook leaves a number to it
    resources = task.get("resources") if isinstance(task.get("resources"), Mapping) else {}
    task_gpu = accelerator_of(resources.get("accelerators"))
    candidates = []
    for c in rb.secondary.candidates:
        gpu = accelerator_of(c.accelerators) or task_gpu
        if gpu is None:
            return Unsized(rb.name, f"candidate {c.infra} names no accelerators, nor does the task")
        candidates.append((c.infra, gpu))
    gpus = rb.cluster.gpus if rb.cluster else None
    if gpus is None and (per_node := task_gpu or (candidates[0][1] if candidates else None)):
        nodes = task.get("num_nodes", 1)
        gpus = nodes * per_node[1] if isinstance(nodes, int) and nodes > 0 else None
    if gpus is None:
        return Unsized(rb.name, "no GPU count: give cluster.gpus")
    return FleetJob(
        name=rb.name,
        workload=rb.workload.value,
        gpus=gpus,
        rto_s=rb.rto_target.total_seconds(),
        candidates=tuple(dict.fromkeys(place(infra, gpu[0]) for infra, gpu in candidates)),
        gpu_hour_usd=rb.cluster.gpu_hour_usd if rb.cluster else None,
        priority=rb.fleet.priority,
        primary=rb.primary.infra.strip("/").lower(),
    )


def accelerator_of(spec: object) -> tuple[str, int] | None:
    """`H100:8` -> ("H100", 8); `H100` -> ("H100", 1); SkyPilot's `{H100: 8}` and list forms
    give their first entry; anything else None."""
    if isinstance(spec, Mapping):
        spec = next((f"{k}:{v}" if v is not None else str(k) for k, v in spec.items()), None)
    elif isinstance(spec, list | tuple):
        spec = spec[0] if spec else None
    if not isinstance(spec, str) or not spec.strip():
        return None
    name, _, count = spec.strip().partition(":")
    try:
        per_node = int(float(count)) if count else 1
    except ValueError:
        return None
    return (name, per_node) if per_node > 0 else None


def _task(rb: Runbook) -> dict:
    if not rb.job.task:
        return {}
    try:
        return read_task(rb.resolve(rb.job.task), rb.job.task)[0]
    except ConfigError:  # validate reports a bad task; the fleet reads what it can without it
        return {}
