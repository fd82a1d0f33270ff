"""Failover → failback → failover (issue #34): each resumes from the newest certified
checkpoint at the site it resumes on, never an older one to prove determinism.

Before each failover the pre-failure log is cut as a deployment's secondary holds it (copied
with the checkpoints, so it ends at the newest one): its own steps prove nothing, and before
this every such failover rolled back one checkpoint. Real trainer (50 ms a step), real local
compute, real `file://` stores of a sandbox; the walker on threads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lifeboat_dr.core.certify import certify_replica
from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
from lifeboat_dr.core.failover.walk import execute
from lifeboat_dr.core.replication.direction import replicate_by_site_state
from lifeboat_dr.core.resume import parse_losses
from lifeboat_dr.flows.drills.base import amend
from lifeboat_dr.flows.sandbox import sandbox_images, sandbox_of, sandboxed
from lifeboat_dr.flows.wiring import (
    build_failback_steps,
    build_steps,
    failback_cluster,
    new_ledger,
    providers_for,
    replication_settings,
    settings_for,
    swapped,
)
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.loader import load_runbook
from tests.failover.conftest import Gate

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.processes, pytest.mark.timeout(420)]


def newest_certified(rb) -> int:
    """The newest checkpoint certified on the secondary (the failover's site)."""
    p = providers_for(rb, registry=FakeRegistry())
    return certify_replica(p.secondary, p.primary, layout=rb.checkpoint.layout.value).certified.step


def as_replicated(loss_log: Path, newest: int) -> None:
    """The pre-failure log as a deployment's secondary holds it: copied with the replication
    pass that copied the newest checkpoint, so it ends at that checkpoint's step."""
    lines = loss_log.read_text().splitlines()
    loss_log.write_text("".join(f"{ln}\n" for ln in lines if all(s <= newest for s in parse_losses(ln))))


def newest_committed(store, rb) -> int:
    return max(c.step for c in committed_checkpoints(store, rb.checkpoint.layout.value))


def test_failover_failback_failover_each_resume_from_the_newest_certified_checkpoint(tmp_path):
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "ping-pong", root=tmp_path)
    box = sandbox_of("ping-pong", tmp_path)
    rb = amend(rb, job={"command": rb.job.command.replace("--steps 50", "--steps 4000 --step-seconds 0.05")})
    providers = providers_for(rb, registry=FakeRegistry(sandbox_images(rb)))
    entries = []
    try:
        for cycle in range(2):
            # failover: the primary is down (its job killed), its commits replicated before
            newest = newest_certified(rb)
            as_replicated(box.pre_failure_log, newest)
            over = build_steps(rb, run_id=f"over-{cycle}", providers=providers, evidence=["test: outage"])
            entry = execute(
                settings_for(rb), over, new_ledger(rb, f"over-{cycle}"), Gate(), run_id=f"over-{cycle}"
            )
            assert entry.outcome == "completed" and "rollback" not in entry.notes, entry.notes
            assert entry.checkpoint_step == newest, (cycle, entry.checkpoint_step, newest)
            assert entry.parity.outcome == "passed" and entry.parity.replayed_from is not None, entry.parity
            entries.append(entry)
            time.sleep(1.5)  # it trains on the secondary, committing a checkpoint every 5 steps

            # failback: the standby job stops at its next checkpoint; the primary resumes from it
            view = swapped(rb)
            back = build_failback_steps(
                rb,
                run_id=f"back-{cycle}",
                providers=providers_for(view, registry=FakeRegistry(sandbox_images(rb))),
            )
            ledger = new_ledger(rb, f"back-{cycle}", kind="failback")
            entry = execute(settings_for(rb), back, ledger, Gate(), run_id=f"back-{cycle}")
            assert entry.outcome == "completed" and "rollback" not in entry.notes, entry.notes
            # the standby job's last commit (fenced, it commits no more), handed back to the primary
            assert entry.checkpoint_step == newest_committed(providers.secondary, rb), entry.notes
            assert entry.parity.outcome == "passed", entry.parity
            entries.append(entry)
            time.sleep(1.5)  # it trains on the primary again

            # the primary dies again: its job killed, its commits so far replicated
            providers.compute.teardown(failback_cluster(rb))
            replicate_by_site_state(replication_settings(rb), providers.primary, providers.secondary)
        assert [e.kind for e in entries] == ["failover", "failback"] * 2
        assert len({e.checkpoint_step for e in entries}) == 4, "each resumed further on"
    finally:
        for cluster in providers.compute.clusters():
            providers.compute.teardown(cluster)
