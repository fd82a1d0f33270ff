"""The `failback` flow: back to the recovered primary, by the failover's own walker.

Thin: `lifeboat_dr.flows.wiring.build_failback_steps` builds `FailbackSteps` over the runbook with its
sites' roles swapped, and `lifeboat_dr.flows.failover.execute` walks the same step graph (each step a
task run). Reverse replication catches the primary up, certification runs there, a human
approves, the fence makes the primary active and the secondary's job stops at its next
checkpoint boundary, the job resumes on the primary and loss parity is checked against the
secondary job's log. The ledger entry's kind is `failback`.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime
from typing import Literal

from prefect import flow

from lifeboat_dr.core.failover.walk import fence_read_back
from lifeboat_dr.flows.failover import _secs, execute


@flow(name="failback", log_prints=True)
def failback(runbook: str, approval: Literal["wait", "approve", "reject"] = "wait") -> dict:
    """Move a failed-over job back to its recovered primary site; measure and record RTO and RPO.

    Args:
        runbook: Path of the runbook YAML on the worker.
        approval: Without Slack: wait for the Prefect UI or `lifeboat approve`, or decide at
            once (`approve` only for a runbook whose every site is on this machine).
    """
    from prefect.runtime import flow_run

    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.record import publish
    from lifeboat_dr.flows.wiring import build_failback_steps, build_gate, build_ledger, settings_for
    from lifeboat_dr.kernel.errors import LifeboatError, StandDown, WriteFailed
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    run_id = str(flow_run.id or f"local-{datetime.now(UTC):%Y%m%dT%H%M%S}")
    guard = Guard(rb, run_id, action="failback", approval=approval)  # a parameter is not a person
    steps = build_failback_steps(rb, run_id=run_id)
    ledger = build_ledger(rb, run_id=run_id, kind="failback", reopen=True)  # a re-run goes on from its record
    gate = build_gate(rb, console=guard.console)
    try:  # the failover's lock: one failover or failback of a runbook at a time
        with guard.acting(ledger, gate.notify):
            entry = execute(settings_for(rb), steps, ledger, gate, run_id=run_id)
    except StandDown as e:  # another run holds the lock (a re-run: an earlier attempt may have fenced)
        if ledger.prior is not None:
            fence_read_back(steps, ledger, "this re-run stood down")
        ledger.note("stood down", str(e))
        entry = ledger.finish("stood-down")
    except LifeboatError as e:  # a re-run that could not even take the lock: did an earlier attempt fence?
        if ledger.prior is not None:
            with suppress(WriteFailed):
                fence_read_back(steps, ledger, f"this re-run failed ({e})")
        raise
    finally:
        picture = publish(ledger.entry)
    return {
        "run_id": run_id,
        "kind": entry.kind,
        "outcome": entry.outcome,
        "rto_s": _secs(entry.rto),
        "rpo_s": _secs(entry.rpo),
        "checkpoint": entry.checkpoint,
        "timeline": str(picture) if picture else None,
    }
