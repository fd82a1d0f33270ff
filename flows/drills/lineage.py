"""Drills of the active lineage: a zombie primary after failover, and the failback. See __init__.py."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lifeboat_dr.flows.drills.base import (
    SANDBOX_JOB_STEPS,
    Check,
    Outcome,
    Rig,
    amend,
    completed,
    simulated_outage,
)

ZOMBIE_STEP = 999_990  # a step the sandbox job never reaches: the zombie's own checkpoint

# -- zombie-primary ------------------------------------------------------------------------


def prepare_zombie_primary(rig: Rig, options: Mapping[str, Any]) -> None:
    """A partition: the failover cannot reach the primary's store, so the fence misses it and
    the old primary keeps training (and committing) there."""
    from lifeboat_dr.flows.drills.sites import UnreachableStore

    rig.primary = UnreachableStore(rig.rb.store_uri(rig.rb.primary.store))
    simulated_outage(rig, "provider: primary partitioned (drill: zombie primary)")


def verify_zombie_primary(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat_dr.core.certify import LINEAGE, certify_replica
    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.core.replication.direction import direction
    from lifeboat_dr.flows.wiring import open_sites
    from lifeboat_dr.kernel.errors import StopFailover
    from lifeboat_dr.standins.checkpoints import replicate as raw_copy
    from lifeboat_dr.standins.checkpoints import write_checkpoint

    primary, secondary = open_sites(rig.rb)  # the partition is over: both answer again
    checks = [completed(outcome)]
    zombie = write_checkpoint(primary, "manifest", ZOMBIE_STEP)
    try:
        commit_checkpoint(primary, zombie, ZOMBIE_STEP, 0)
        checks.append(Check("the zombie commits on its own store (it missed the fence)", True, zombie))
    except StopFailover as e:  # the fence reached it after all: nothing to prove below
        checks.append(Check("the zombie commits on its own store (it missed the fence)", False, str(e)))
    before = _snapshot(secondary)
    try:
        direction(rig.rb.name, primary, secondary, source="primary")
        checks.append(Check("replication from the zombie's site is refused", False, "it was allowed"))
    except StopFailover as e:
        checks.append(Check("replication from the zombie's site is refused", "refusing" in str(e), str(e)))
    way = direction(rig.rb.name, primary, secondary)
    checks.append(
        Check(
            "replication follows the site state (secondary -> primary)",
            way.source_role == "secondary",
            f"{way.state.describe()}: {way.source.uri} -> {way.destination.uri}",
        )
    )
    try:
        commit_checkpoint(primary, write_checkpoint(primary, "manifest", ZOMBIE_STEP + 5), ZOMBIE_STEP + 5, 0)
        checks.append(Check("the zombie is fenced once its store answers", False, "it committed again"))
    except StopFailover as e:
        checks.append(Check("the zombie is fenced once its store answers", True, str(e)))
    checks.append(Check("the active site's checkpoints are untouched", _snapshot(secondary) == before, ""))
    raw_copy(primary, secondary, zombie)  # copied behind Lifeboat's back: still never certified
    report = certify_replica(secondary, None, layout=rig.rb.checkpoint.layout.value)
    rejected = [r for r in report.rejected if r.step == ZOMBIE_STEP]
    checks.append(
        Check(
            "the zombie's checkpoint is never certified",
            bool(rejected) and rejected[0].reason == LINEAGE and report.certified.step != ZOMBIE_STEP,
            rejected[0].detail if rejected else f"certified step {getattr(report.certified, 'step', None)}",
        )
    )
    return checks


def _snapshot(store) -> list[tuple]:
    return sorted((o.key, o.size, o.crc32c) for o in store.list() if not o.key.startswith("_lifeboat/"))


# -- failback ------------------------------------------------------------------------------


def prepare_failback(rig: Rig, options: Mapping[str, Any]) -> None:
    """A plain failover first, whose cluster outlives it: its job goes on training on the
    secondary, at 50 ms a step and far enough (20x the sandbox's steps, ~50 s) to be still
    training when the failback fences it: it commits work of its own to fail back."""
    command = rig.rb.job.command.replace(
        f"--steps {SANDBOX_JOB_STEPS}", f"--steps {20 * SANDBOX_JOB_STEPS} --step-seconds 0.05"
    )
    rig.rb = amend(rig.rb, job={"command": command})
    rig.keep_cluster = True
    simulated_outage(rig)


def verify_failback(rig: Rig, outcome: Outcome) -> list[Check]:
    """After the failover, fail back (the same walker, roles swapped) and check the record."""
    from lifeboat_dr.core.failover.walk import execute
    from lifeboat_dr.core.replication.direction import direction
    from lifeboat_dr.core.sitestate import read_site_state
    from lifeboat_dr.flows.approval import ChatGate
    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.wiring import (
        build_failback_steps,
        build_ledger,
        open_sites,
        providers_for,
        settings_for,
        swapped,
    )
    from lifeboat_dr.providers.chat.console import ConsoleChat
    from lifeboat_dr.providers.image_registry import FakeRegistry

    checks = [completed(outcome)]
    view = swapped(rig.rb)
    registry = FakeRegistry({i.image: i.digest or "sha256:" + "0" * 64 for i in view.prestage.images})
    run_id = f"{rig.drill_id}-back"
    steps = build_failback_steps(
        rig.rb, run_id=run_id, providers=providers_for(view, registry=registry), drill=rig.drill_id
    )
    ledger = build_ledger(rig.rb, run_id=run_id, drill=rig.kind, kind="failback")
    ledger.note("drill", rig.kind)
    primary, secondary = open_sites(rig.rb)
    _await_own_commit(rig, outcome, secondary)
    error = None
    try:
        guard = Guard(rig.rb, run_id, action="drill", approval="approve", rehearsal=True)
        gate = ChatGate(rig.rb, ConsoleChat(guard.console), drill=True)
        with guard.acting(ledger, gate.notify, store=secondary):
            execute(settings_for(rig.rb), steps, ledger, gate, run_id=run_id, drill=True)
    except Exception as e:  # the checks judge it
        error = e
    entry = ledger.entry
    checks.append(
        Check(
            "failback completed",
            entry.outcome == "completed",
            f"outcome {entry.outcome}"
            + (f" ({type(error).__name__}: {error})" if error else "")
            + (f", RTO {entry.rto.total_seconds():.1f}s" if entry.rto else "")
            + (f", RPO {entry.rpo.total_seconds():.1f}s" if entry.rpo else ""),
        )
    )
    checks.append(Check("ledger entry of kind failback", entry.kind == "failback", entry.kind))
    checks.append(_resumed_from_the_secondary_jobs_last_commit(rig, outcome, entry, secondary))
    state = read_site_state({"primary": primary, "secondary": secondary})
    checks.append(
        Check(
            "the primary is active again on both stores",
            state.active == "primary" and not state.stale and not state.unreachable,
            f"{state.describe()}; stale: {list(state.stale)}",
        )
    )
    checks.append(
        Check(
            "the resumed checkpoint was certified on the primary",
            bool(entry.checkpoint) and entry.checkpoint.startswith(primary.uri),
            entry.checkpoint or "none",
        )
    )
    way = direction(rig.rb.name, primary, secondary)
    checks.append(
        Check(
            "replication goes primary -> secondary again",
            way.source_role == "primary",
            f"{way.source.uri} -> {way.destination.uri}",
        )
    )
    return checks


OWN_COMMIT_WAIT_S = 30.0


def _own_commits(rig: Rig, secondary) -> list[int]:
    """Steps committed on the secondary by its own lineage (not replicated foreign ones)."""
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints, foreign_checkpoints

    layout = rig.rb.checkpoint.layout.value
    foreign = foreign_checkpoints(secondary, None, layout)
    return [c.step for c in committed_checkpoints(secondary, layout) if c.prefix.strip("/") not in foreign]


def _await_own_commit(rig: Rig, outcome: Outcome, secondary) -> None:
    """Fail back only once the secondary's job has committed a checkpoint of its own, newer
    than the one the failover resumed from: the work the failback must hand back (a fast
    walk can otherwise fence the job before its first commit). Bounded; the checks judge."""
    resumed = getattr(getattr(outcome.steps.get("certify"), "certified", None), "step", None)
    deadline = time.monotonic() + OWN_COMMIT_WAIT_S
    while resumed is not None and time.monotonic() < deadline:
        if max(_own_commits(rig, secondary), default=-1) > resumed:
            return
        time.sleep(0.1)


def _resumed_from_the_secondary_jobs_last_commit(rig: Rig, outcome: Outcome, entry, secondary) -> Check:
    """The failback resumed from the newest checkpoint the secondary's job committed before
    the fence, a step it wrote itself (newer than the one the failover resumed from)."""
    newest = max(_own_commits(rig, secondary), default=None)
    failover = outcome.steps.get("certify")
    resumed_from = getattr(getattr(failover, "certified", None), "step", None)
    step = int(entry.checkpoint.rstrip("/").rsplit("-", 1)[-1]) if entry.checkpoint else None
    return Check(
        "resumed from the newest checkpoint the secondary's job committed",
        step is not None and step == newest and resumed_from is not None and step > resumed_from,
        f"resumed step {step}; the secondary's newest commit {newest}; the failover resumed from {resumed_from}",
    )
