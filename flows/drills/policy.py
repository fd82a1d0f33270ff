"""Drills of the guard rails: nobody approves, a stale primary writes after fencing. See __init__.py."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from lifeboat_dr.flows.drills.base import (
    Check,
    Outcome,
    Rig,
    amend,
    completed,
    simulated_outage,
)

# -- approval-timeout ----------------------------------------------------------------------


def prepare_approval_timeout(rig: Rig, options: Mapping[str, Any]) -> None:
    a = rig.rb.approval
    timeout = f"{float(options.get('timeout_s', 2.0))}s"
    escalation = None
    if a.escalation is not None:
        escalation = {"approvers": list(a.escalation.approvers), "timeout": timeout}
    rig.rb = amend(
        rig.rb,
        approval={
            "required": True,
            "approvers": list(a.approvers) or ["U0DRILL"],
            "channel": None,  # the console gate: no Slack message leaves a drill
            "timeout": timeout,
            "escalation": escalation,
            "on_timeout": str(getattr(a.on_timeout, "value", a.on_timeout)),
        },
    )
    rig.approval = "wait"  # and nobody answers
    policy = str(getattr(rig.rb.approval.on_timeout, "value", rig.rb.approval.on_timeout))
    rig.facts.update(on_timeout=policy, expected="completed" if policy == "proceed" else "aborted")
    simulated_outage(rig)


def verify_approval_timeout(rig: Rig, outcome: Outcome) -> list[Check]:
    return approval_timeout_checks(outcome.entry, rig.facts["on_timeout"])


def approval_timeout_checks(entry: Any, on_timeout: str) -> list[Check]:
    expected = "completed" if on_timeout == "proceed" else "aborted"
    note = (entry.notes.get("approval", "") if entry else "") or ""
    phases = entry.phases if entry else {}
    checks = [
        Check("approval was requested", "approval_requested" in phases, note or "no approval note"),
        Check(
            "nobody answered: the policy decided at the deadline",
            "by policy via policy" in note and "nobody answered" in note,
            note or "no approval note",
        ),
        Check(
            f"on_timeout={on_timeout} applies",
            getattr(entry, "outcome", None) == expected,
            f"outcome {getattr(entry, 'outcome', None)}, expected {expected}",
        ),
    ]
    if expected == "aborted":
        failed = [f.error for f in (entry.failures if entry else []) if f.phase == "approval_granted"]
        checks.append(
            Check(
                "the abort is recorded and nothing was provisioned",
                bool(failed) and "provisioned" not in phases,
                failed[0] if failed else "no failure recorded at approval",
            )
        )
    else:
        checks.append(
            Check("the approval is recorded as granted", "approval_granted" in phases, note or "no note")
        )
    return checks


# -- stale-primary -------------------------------------------------------------------------


def prepare_stale_primary(rig: Rig, options: Mapping[str, Any]) -> None:
    simulated_outage(rig)


def verify_stale_primary(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat_dr.flows.wiring import open_sites

    primary, secondary = open_sites(rig.rb)
    fenced = outcome.steps.get("fence")
    checks = [completed(outcome)]
    checks += stale_writer_checks(primary, secondary, stale_epoch=0, new_epoch=getattr(fenced, "epoch", None))
    return checks


def stale_writer_checks(primary, secondary, *, stale_epoch: int, new_epoch: int | None) -> list[Check]:
    """The old primary (still holding `stale_epoch`) writes a checkpoint and tries to commit
    it, on its own store and on the replica; both must refuse, and the replica not change."""
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
    from lifeboat_dr.core.fencing import check_lease, guarded_commit
    from lifeboat_dr.kernel.errors import StopFailover
    from lifeboat_dr.standins.trainer.core import checkpoint_name

    def snapshot(store) -> list[tuple]:
        return [(o.key, o.size, o.version) for o in store.list() if not o.key.startswith("_lifeboat/")]

    ckpt = checkpoint_name(999_999)
    marker = f"{ckpt}/{MANIFEST_NAME}"
    before = snapshot(secondary)
    checks = []
    try:
        check_lease(primary, stale_epoch)
        checks.append(
            Check("check_lease tells the stale primary to stop", False, "its epoch is still current")
        )
    except StopFailover as e:
        checks.append(Check("check_lease tells the stale primary to stop", True, str(e)))
    for side, store in (("primary", primary), ("secondary", secondary)):
        if side == "primary":  # it writes its shard as it always did; the commit is what counts
            store.put(f"{ckpt}/model.npy", b"stale weights")
        try:
            guarded_commit(store, marker, stale_epoch, 999_999)
            checks.append(Check(f"stale commit refused on the {side} store", False, "the marker was written"))
        except StopFailover as e:
            exists = any(o.key == marker for o in store.list(ckpt))
            checks.append(Check(f"stale commit refused on the {side} store", not exists, str(e)))
    after = snapshot(secondary)
    checks.append(
        Check(
            "the secondary's checkpoints are untouched",
            before == after,
            f"{len(after)} objects unchanged"
            if before == after
            else f"{len(before)} -> {len(after)} objects",
        )
    )
    if new_epoch is not None:  # control: the refusal is the epoch's doing, not a broken store
        probe = f"_lifeboat/drill-commit-probe-{secrets.token_hex(3)}"
        try:
            guarded_commit(primary, probe, new_epoch, 0)
            primary.delete(probe)
            checks.append(Check("the new lease holder may commit", True, f"epoch {new_epoch}"))
        except Exception as e:
            checks.append(Check("the new lease holder may commit", False, f"{type(e).__name__}: {e}"))
    return checks
