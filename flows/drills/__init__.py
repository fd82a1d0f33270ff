"""Drills: break one thing on purpose, in a sandbox, and prove the failover coped.

Each kind is two halves: how to inject its fault into a sandboxed copy of the runbook
(`prepare`, before the failover) and the checks that prove the failover handled it
(`verify`, after). `run_drill` puts them around one failover run and returns a typed
`DrillResult`; a drill passes only when every check does.

    process-kill       the primary trainer (a real process) is SIGKILLed at a random step;
                       the real probes + quorum confirm; the secondary resumes from the
                       newest certified checkpoint with losses equal to an uninterrupted run
                       (`trainer="torch"`: the PyTorch job under torchrun, DCP checkpoints)
    gpu-fault          XID 79 through the NVML fake fails gpu_health; alone it never
                       confirms, with a stalled heartbeat it does; the evidence names it
    region-outage      the primary's zone (scope az) or region (scope region) is blocked and
                       its store unreachable: the plan never offers it, certification runs
                       manifest-only and says so, the failover completes
    corrupted-replica  one byte of a shard of the newest replica flipped (same size): it is
                       rejected for its CRC and the failover resumes from the previous one
    approval-timeout   approval required, nobody answers: the runbook's on_timeout applies
                       (abort -> aborted, proceed -> completed) and the trail is recorded
    stale-primary      after fencing, the old primary (old epoch) tries to commit: refused,
                       and the secondary's checkpoints are untouched
    zombie-primary     the fence cannot reach the primary's store (a partition); the old
                       primary keeps committing there: replication from it is refused, the
                       site state reaches its store and stops it, its checkpoint never certifies
    failback           after the failover, the failback flow's steps bring the job home:
                       kind `failback` in the ledger, the primary active on both stores,
                       replication primary -> secondary again

and, for the torch job's training guard (`flows/drills/guard.py`): nccl-hang, cuda-error,
recovered by the recovery ladder (its restart and relaunch rungs, the failover last);
and, for the inference classes (`flows/drills/serving.py`): serving-kill,
serving-stale-standby, serving-degraded (realtime runbooks) and batch-resume.

Drills never touch production: everything lives under `.lifeboat/sandbox/<drill id>/`
(`lifeboat_dr.flows.sandbox`), the cluster is `cluster_name(rb, drill id)`, every drill ends with a
check that no cluster is left (tearing down any that is), and the ledger entry is marked
a drill with its kind. The failover itself is passed in (`FailoverRun`): `flows/drill.py`
runs the real `execute` inside a Prefect flow; everything here is plain Python.
"""

from __future__ import annotations

import random
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lifeboat_dr.flows.drills.base import (
    KINDS,
    SCOPES,
    TRAINER_KINDS,
    Check,
    Drill,
    DrillResult,
    FailoverRun,
    Outcome,
    Rig,
    marked_drill,
    no_cluster_left,
    sandbox,
    stop_process,
)
from lifeboat_dr.flows.drills.detection import (
    prepare_gpu_fault,
    prepare_process_kill,
    verify_gpu_fault,
    verify_process_kill,
)
from lifeboat_dr.flows.drills.guard import (
    GUARD_KINDS,
    prepare_guarded_fault,
    recover_guarded_fault,
    verify_guarded_fault,
)
from lifeboat_dr.flows.drills.lineage import (
    prepare_failback,
    prepare_zombie_primary,
    verify_failback,
    verify_zombie_primary,
)
from lifeboat_dr.flows.drills.policy import (
    prepare_approval_timeout,
    prepare_stale_primary,
    verify_approval_timeout,
    verify_stale_primary,
)
from lifeboat_dr.flows.drills.serving import BATCH_KINDS, SERVING_KINDS
from lifeboat_dr.flows.drills.sites import (
    prepare_corrupted_replica,
    prepare_region_outage,
    verify_corrupted_replica,
    verify_region_outage,
)
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.model import Runbook

INFERENCE_KINDS = SERVING_KINDS + BATCH_KINDS
FLEET_KIND = "fleet"  # three copies of the runbook, room for two: flows/drills/fleet.py; not in `all`
ALL_KINDS = KINDS + GUARD_KINDS + INFERENCE_KINDS + (FLEET_KIND,)

DRILLS: dict[str, Drill] = {
    "process-kill": Drill(prepare_process_kill, verify_process_kill, history=False),
    "gpu-fault": Drill(prepare_gpu_fault, verify_gpu_fault),
    "region-outage": Drill(prepare_region_outage, verify_region_outage),
    "corrupted-replica": Drill(prepare_corrupted_replica, verify_corrupted_replica),
    "approval-timeout": Drill(prepare_approval_timeout, verify_approval_timeout),
    "stale-primary": Drill(prepare_stale_primary, verify_stale_primary),
    "zombie-primary": Drill(prepare_zombie_primary, verify_zombie_primary),
    "failback": Drill(prepare_failback, verify_failback),
    **{
        kind: Drill(prepare_guarded_fault, verify_guarded_fault, history=False, recover=recover_guarded_fault)
        for kind in GUARD_KINDS
    },
}


def run_drill(
    rb: Runbook,
    kind: str,
    *,
    failover: FailoverRun,
    scope: str | None = None,
    seed: int | str | None = None,
    root: Path | None = None,
    options: Mapping[str, Any] | None = None,
    keep: bool = False,
    trainer: str = "numpy",
) -> DrillResult:
    """Sandbox `rb`, inject `kind`'s fault, run `failover`, check, tear down. Never raises
    for what the drill finds: a broken failover is a failed check. The sandbox folder is
    removed after a pass (unless `keep`) and kept after a failure."""
    from lifeboat_dr.flows.sandbox import SANDBOX_ROOT, sandbox_of

    if kind in INFERENCE_KINDS:  # serving failovers and the batch resume: their own rigs
        from lifeboat_dr.flows.drills.serving import inference_drill

        drill_id = f"{kind}-{secrets.token_hex(4)}"
        return inference_drill(
            rb, kind, root=root or SANDBOX_ROOT, drill_id=drill_id, started=time.monotonic(), keep=keep
        )
    if kind not in DRILLS:
        raise ConfigError(f"unknown drill kind {kind!r}; use one of {', '.join(ALL_KINDS)} or all")
    if scope is not None and scope not in SCOPES:
        raise ConfigError(f"unknown drill scope {scope!r}; use az or region")
    check_trainer(kind, trainer)
    drill_id = f"{kind}-{secrets.token_hex(4)}"
    box = sandbox_of(drill_id, root or SANDBOX_ROOT)
    started = time.monotonic()
    rng = random.Random(seed if seed is not None else drill_id)
    rig = Rig(kind, drill_id, rb, box.root, rng, scope, trainer)
    checks: list[Check] = []
    outcome: Outcome | None = None
    try:
        rig.rb = sandbox(rb, drill_id, root or SANDBOX_ROOT, trainer, history=DRILLS[kind].history)
        DRILLS[kind].prepare(rig, options or {})
        recover = DRILLS[kind].recover
        outcome = recover(rig, failover) if recover else failover(rig)
        checks += DRILLS[kind].verify(rig, outcome)
        checks.append(marked_drill(rig, outcome))
    except Exception as e:  # an injection or check that could not run is a failed drill
        checks.append(Check("drill ran to the end", False, f"{type(e).__name__}: {e}"))
    finally:
        for proc in rig.processes:
            stop_process(proc)
        checks.append(no_cluster_left(rig))
    passed = all(c.ok for c in checks)
    if passed and not keep:  # a failed drill's sandbox stays for the post-mortem
        shutil.rmtree(box.root, ignore_errors=True)
    return DrillResult(
        kind=kind,
        passed=passed,
        checks=tuple(checks),
        run_id=drill_id,
        outcome=outcome.outcome if outcome else None,
        seconds=time.monotonic() - started,
        scope=rig.scope,
    )


def check_trainer(kind: str, trainer: str) -> None:
    """Refuse a sandbox job a kind does not drill (the torch job: process-kill)."""
    if trainer not in TRAINER_KINDS:
        raise ConfigError(f"unknown trainer {trainer!r}; use one of {', '.join(TRAINER_KINDS)}")
    if kind not in TRAINER_KINDS[trainer] and kind != "all":
        raise ConfigError(
            f"the {trainer} trainer drills {', '.join(TRAINER_KINDS[trainer])} only, not {kind}"
        )


def kinds_for(kind: str, rb: Runbook | None = None, trainer: str = "numpy") -> tuple[str, ...]:
    """`all` (the kinds that fit the runbook's workload and the sandbox's trainer) or one
    kind, checked."""
    if kind == "all":
        workload = getattr(getattr(rb, "workload", None), "value", None)
        if workload == "realtime-inference":
            return SERVING_KINDS
        check_trainer(kind, trainer)
        training = TRAINER_KINDS[trainer]
        return training + BATCH_KINDS if workload == "batch-inference" else training
    if kind not in DRILLS and kind not in INFERENCE_KINDS and kind != FLEET_KIND:
        raise ConfigError(f"unknown drill kind {kind!r}; use one of {', '.join(ALL_KINDS)} or all")
    if kind == FLEET_KIND:
        if rb is not None and rb.serving is not None:
            raise ConfigError(f"drill 'fleet' rehearses training failovers; {rb.name} serves traffic")
        return (kind,)
    if rb is not None and (kind in SERVING_KINDS) != (rb.serving is not None):
        raise ConfigError(
            f"drill {kind!r} does not fit {rb.name} ({rb.workload.value}); "
            f"use one of {', '.join(kinds_for('all', rb))}"
        )
    if kind in DRILLS:
        check_trainer(kind, trainer)
    return (kind,)


__all__ = [
    "ALL_KINDS",
    "FLEET_KIND",
    "KINDS",
    "SCOPES",
    "Check",
    "DrillResult",
    "FailoverRun",
    "Outcome",
    "Rig",
    "check_trainer",
    "kinds_for",
    "run_drill",
]
