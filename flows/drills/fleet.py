"""Drill `fleet`: one outage takes three copies of the runbook at once; the secondary holds two.

The copies (`<runbook>-fleet-1..3`, priced apart so the fleet's order is known: the first two
are placed) are written under the drill's sandbox folder, each declaring one quota: twice the
job's GPUs on the runbook's first candidate outside its primary. The `fleet-failover` flow's
body then runs in dry run (`flows/fleet_failover.py`, `run_fleet`): one plan, one decision (the
console's, in a rehearsal), the placed copies' own dry-run failovers, each in its own sandbox,
and the fleet's ledger entry. A training runbook only (a serving one moves traffic: its own
drills), with a candidate outside its primary.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import yaml

from lifeboat_dr.flows.drills.base import Check, DrillResult
from lifeboat_dr.kernel.errors import ConfigError

COPIES = 3
PLACED = 2


def fleet_copies(rb, folder: Path) -> list[Path]:
    """Three copies of `rb` in `folder`, the quota of two declared; `ConfigError` when the
    runbook cannot be drilled so."""
    from lifeboat_dr.core.fleet.capacity import surviving
    from lifeboat_dr.flows.fleet_inputs import Unsized, fleet_job

    if rb.serving is not None:
        raise ConfigError(f"drill 'fleet' rehearses training failovers; {rb.name} serves traffic")
    job = fleet_job(rb)
    if isinstance(job, Unsized):
        raise ConfigError(f"drill 'fleet': {rb.name} cannot be sized: {job.why}")
    outside = surviving(job.candidates, job.primary)
    if not outside:
        raise ConfigError(f"drill 'fleet': {rb.name} has no candidate outside its primary {job.primary}")
    doc = yaml.safe_load(rb.path.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    if rb.job.task:  # the task keeps its path relative to the runbook
        (folder / rb.job.task).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(rb.resolve(rb.job.task), folder / rb.job.task)
    paths = []
    for i in range(1, COPIES + 1):
        name = f"{rb.name}-fleet-{i}"
        price = (rb.cluster.gpu_hour_usd if rb.cluster and rb.cluster.gpu_hour_usd else 1.0) * (
            COPIES + 1 - i
        )
        quota = {"infra": outside[0].infra, "accelerator": outside[0].accelerator, "gpus": PLACED * job.gpus}
        copy = {
            **doc,
            "name": name,
            "cluster": {**(doc.get("cluster") or {}), "gpus": job.gpus, "gpu_hour_usd": price},
            "fleet": {"priority": 0, "quota": [quota]},
        }
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(copy, sort_keys=False))
        paths.append(path)
    return paths


def fleet_drill(rb, *, flow_run, root: Path, drill_id: str, keep: bool = False) -> DrillResult:
    """Run the fleet drill of `rb` inside the current flow run; never raises for what it finds."""
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.fleet_failover import run_fleet

    started = time.monotonic()
    folder = root / drill_id / "runbooks"
    paths = fleet_copies(rb, folder)
    state = run_fleet(
        [str(p) for p in paths], run_id=drill_id, flow_run=flow_run, dry_run=True, recovery="4h"
    )
    result = state.result(raise_on_failure=False)
    if not isinstance(result, dict):
        checks = (Check("the fleet failover ran", False, f"{state.type.value}: {state.message}"),)
        return DrillResult("fleet", False, checks, drill_id, "failed", time.monotonic() - started)
    jobs = result["jobs"]
    placed, waiting = jobs[:PLACED], jobs[PLACED:]
    ledger = LedgerFile()
    entries = [ledger.entry(j["runbook"], j["run_id"]) if j["run_id"] else None for j in placed]
    checks = (
        Check(
            "the plan places two copies and the third waits",
            [j["outcome"] for j in waiting] == ["waiting"] and all(j["place"] for j in placed),
            ", ".join(f"{j['runbook']}: {j['place'] or 'waits'}" for j in jobs),
        ),
        Check(
            "each placed copy's own failover completed, with its own ledger entry",
            all(e is not None and e.outcome == "completed" for e in entries),
            ", ".join(f"{j['runbook']}: {j['outcome']}" for j in placed),
        ),
        Check(
            "each took the fleet's one decision as its approval",
            all(e is not None and result["fleet"] in e.notes.get("approval", "") for e in entries),
            result["decision"][:120],
        ),
        Check(
            "the waiting copy started no failover",
            all(ledger.read(j["runbook"]) == [] for j in waiting),
            ", ".join(j["runbook"] for j in waiting),
        ),
        Check(
            "the fleet entry says which jobs met their class RTO",
            all(j["met"] is not None for j in placed),
            ", ".join(
                f"{j['runbook']}: {j['rto_s']:.0f}s of {j['rto_target_s']:.0f}s" for j in placed if j["rto_s"]
            ),
        ),
    )
    passed = all(c.ok for c in checks)
    if passed and not keep:
        shutil.rmtree(root / drill_id, ignore_errors=True)
    outcome = "completed" if state.is_completed() else state.type.value.lower()
    return DrillResult("fleet", passed, checks, drill_id, outcome, time.monotonic() - started)
