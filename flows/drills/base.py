"""What every drill shares: its result, its rig, and the sandbox helpers. See __init__.py."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifeboat_dr.runbooks.model import Runbook

KINDS = (
    "process-kill",
    "gpu-fault",
    "region-outage",
    "corrupted-replica",
    "approval-timeout",
    "stale-primary",
    "zombie-primary",
    "failback",
)
SCOPES = ("az", "region")
TRAINER_KINDS = {  # the kinds each sandbox job drills (the guard's: flows/drills/guard.py)
    "numpy": KINDS,
    "torch": ("process-kill", "nccl-hang", "cuda-error"),
}

SANDBOX_JOB_STEPS = (
    50  # the sandbox job trains to step 50 (lifeboat_dr.flows.sandbox: steps 40 + 2 x every 5)
)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        return f"[{'PASS' if self.ok else 'FAIL'}] {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class DrillResult:
    kind: str
    passed: bool
    checks: tuple[Check, ...]
    run_id: str  # the ledger entry's run id (= the drill id)
    outcome: str | None = None  # the failover's: completed, aborted, failed
    seconds: float = 0.0
    scope: str | None = None

    def lines(self) -> list[str]:
        head = f"drill {self.kind}" + (f" ({self.scope})" if self.scope else "")
        verdict = "passed" if self.passed else "FAILED"
        return [f"{head}: {verdict} in {self.seconds:.1f}s (run {self.run_id}, outcome {self.outcome})"] + [
            "  " + c.line() for c in self.checks
        ]

    def markdown(self) -> str:
        rows = "\n".join(
            f"| {'✅' if c.ok else '❌'} | {c.name} | {c.detail.replace('|', '/')} |" for c in self.checks
        )
        return (
            f"# Drill `{self.kind}`{f' ({self.scope})' if self.scope else ''}: "
            f"{'passed' if self.passed else 'FAILED'}\n\n"
            f"Ledger run `{self.run_id}`, failover outcome `{self.outcome}`, {self.seconds:.1f}s.\n\n"
            f"| | check | detail |\n|---|---|---|\n{rows}\n"
        )

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "scope": self.scope,
            "passed": self.passed,
            "run_id": self.run_id,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 2),
            "checks": [[c.name, c.ok, c.detail] for c in self.checks],
        }


@dataclass
class Rig:
    """One drill's sandbox, and what the failover runs with."""

    kind: str
    drill_id: str
    rb: Runbook  # the sandboxed runbook
    root: Path  # the sandbox folder
    rng: random.Random
    scope: str | None = None
    trainer: str = "numpy"  # the sandbox job (lifeboat_dr.standins.trainer.jobs)
    primary: Any = None  # a Store replacing the sandbox primary (an outage), or None
    compute: Any = None  # a Compute replacing the sandbox's local one, or None
    evidence: list[str] | None = None  # None: the failover's confirm step runs the real probes
    outage_started_at: datetime | None = None
    detected_at: datetime | None = None
    approval: str = "approve"  # the console gate: approve at once, or wait (nobody answers)
    keep_cluster: bool = False  # the failover's cluster outlives its run (failback: its job goes on)
    facts: dict[str, Any] = field(default_factory=dict)  # what the injection saw, for the checks
    processes: list[subprocess.Popen] = field(default_factory=list)  # stopped in any case

    @property
    def clusters_root(self) -> Path:
        return self.rb.base_dir / ".lifeboat" / "clusters"


@dataclass
class Outcome:
    """What the failover run left: its ledger entry, each step's result, its error."""

    entry: Any  # lifeboat_dr.core.ledger.LedgerEntry
    steps: dict[str, Any]  # step name -> its last return value (confirm, fence, certify, plan, ...)
    error: BaseException | None = None

    @property
    def outcome(self) -> str | None:
        return self.entry.outcome if self.entry is not None else None


FailoverRun = Callable[[Rig], Outcome]


@dataclass(frozen=True)
class Drill:
    prepare: Callable[[Rig, Mapping[str, Any]], None]
    verify: Callable[[Rig, Outcome], list[Check]]
    history: bool = True  # the sandbox plays the pre-failure history (False: prepare lives it)
    # how the drill recovers, given the failover (None: the failover itself; the guard's: the ladder)
    recover: Callable[[Rig, FailoverRun], Outcome] | None = None


def sandbox(rb: Runbook, drill_id: str, root: Path, trainer: str = "numpy", history: bool = True) -> Runbook:
    from lifeboat_dr.flows.sandbox import sandboxed

    return sandboxed(rb, drill_id, root=root, trainer=trainer, history=history)


def amend(rb: Runbook, **sections: dict[str, Any] | Any) -> Runbook:
    """A copy of `rb` with sections merged (dicts) or replaced (anything else); same folder."""
    doc = rb.model_dump(mode="json")
    for key, value in sections.items():
        doc[key] = {**(doc.get(key) or {}), **value} if isinstance(value, dict) else value
    new = Runbook.model_validate(doc)
    new._path = rb.path
    return new


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def no_cluster_left(rig: Rig) -> Check:
    """Guaranteed teardown: any cluster still held is named, then torn down."""
    from lifeboat_dr.providers.compute.local import LocalCompute

    compute = LocalCompute(rig.clusters_root)
    left = compute.clusters()
    for name in left:
        compute.teardown(name)
    return Check("no cluster left behind", not left, f"left: {', '.join(left)}" if left else "torn down")


def marked_drill(rig: Rig, outcome: Outcome) -> Check:
    entry = outcome.entry
    ok = entry is not None and entry.drill and entry.notes.get("drill") == rig.kind
    return Check("ledger entry marked as a drill", ok, f"run {rig.drill_id}" if ok else f"entry: {entry}")


def completed(outcome: Outcome) -> Check:
    entry = outcome.entry
    detail = f"outcome {outcome.outcome}"
    if outcome.error is not None:
        detail += f" ({type(outcome.error).__name__}: {outcome.error})"
    elif entry is not None and entry.rto is not None and entry.rpo is not None:
        detail += f", RTO {entry.rto.total_seconds():.1f}s, RPO {entry.rpo.total_seconds():.1f}s"
    return Check("failover completed", outcome.outcome == "completed", detail)


def simulated_outage(rig: Rig, *lines: str) -> None:
    """The failover starts from evidence (as the watch automation would hand it over)."""
    now = utcnow()
    rig.evidence = list(lines) or [f"drill {rig.kind}: simulated outage"]
    rig.outage_started_at = rig.outage_started_at or now
    rig.detected_at = now
