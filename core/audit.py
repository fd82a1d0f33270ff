"""Checkpoint integrity audit: do the stored checkpoints still train like they did?

Certification proves a checkpoint's bytes are the ones written; the audit proves they are
worth resuming from. A random sample (seeded, so a run can be repeated) of the certified
checkpoints on the secondary is loaded, one after another, on one audit cluster (the
runbook's compute, `<runbook>-audit`); the job runs a few steps from each, and its losses
must equal the loss curve of the lineage that wrote it (its guarded-commit marker names it:
`primary@0` the original job, `secondary@1` the job a failover resumed, `primary@2` the one a
failback resumed; a checkpoint without a marker is the original job's) within
`verify.parity_tolerance` (`lifeboat_dr.core.resume.loss_parity`). A lineage's newest
checkpoints, after which it has logged no step yet, cannot be audited and are not sampled;
a lineage whose loss log cannot be found fails its checkpoints. The cluster is torn down
whatever happens.

The audited job must not write over the checkpoints it audits: it runs with
`LIFEBOAT_AUDIT_DIR` set to a scratch folder, and a job under audit writes its
checkpoints, loss log and heartbeat there (the demo trainer does; real jobs should).
Plain Python over the `Compute` interface.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lifeboat_dr.core.resume import ParityResult, loss_parity, parse_losses
from lifeboat_dr.core.sitestate import read_marker
from lifeboat_dr.kernel.errors import LifeboatError, StopFailover

AUDIT_DIR_ENV = "LIFEBOAT_AUDIT_DIR"
ORIGINAL_LINEAGE = "primary@0"  # the job before any failover; its checkpoints may carry no marker


def audit_cluster(name: str) -> str:
    return f"{name}-audit"


def checkpoint_lineage(store, uri: str) -> str:
    """The lineage that committed checkpoint `uri` of `store`, e.g. "secondary@1"."""
    name = uri[len(store.uri.rstrip("/")) + 1 :].strip("/") if uri.startswith(store.uri) else uri
    marker = read_marker(store, name)
    if marker is None:
        return ORIGINAL_LINEAGE
    try:
        return str(json.loads(marker)["lineage"])
    except (ValueError, KeyError, TypeError):
        return f"unreadable marker {name}/"


def lineage_site(lineage: str) -> str:
    """The site a lineage's job ran on: "secondary" for "secondary@1"."""
    return lineage.split("@", 1)[0]


@dataclass(frozen=True)
class Curve:
    """One lineage's recorded losses, and where they were read (for the report)."""

    losses: Mapping[int, float]
    source: str


@dataclass(frozen=True)
class AuditCase:
    step: int
    uri: str
    parity: ParityResult | None
    error: str = ""
    lineage: str = ORIGINAL_LINEAGE

    @property
    def passed(self) -> bool:
        return self.parity is not None and self.parity.passed and self.parity.compared > 0

    def what(self) -> str:
        return self.error or (self.parity.detail if self.parity else "not run")

    def line(self) -> str:
        return f"[{'PASS' if self.passed else 'FAIL'}] step {self.step} ({self.lineage}): {self.what()}"


@dataclass
class AuditReport:
    runbook: str
    seed: int | str
    certified: int  # how many certified checkpoints there were to sample from
    cases: list[AuditCase] = field(default_factory=list)
    cluster: str = ""
    torn_down: bool = False
    error: str = ""
    not_yet: list[int] = field(default_factory=list)  # newest of their lineage: nothing logged after them

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases) and self.torn_down and not self.error

    def lines(self) -> list[str]:
        head = (
            f"audit {self.runbook}: {'passed' if self.passed else 'FAILED'} — {len(self.cases)} of "
            f"{self.certified} certified checkpoint(s) sampled (seed {self.seed}) on {self.cluster}"
        )
        tail = [f"  error: {self.error}"] if self.error else []
        if self.not_yet:
            tail.append(
                f"  not sampled (their lineage has logged no step after them yet): steps {self.not_yet}"
            )
        tail.append(f"  cluster torn down: {'yes' if self.torn_down else 'NO'}")
        return [head] + ["  " + c.line() for c in self.cases] + tail

    def why_failed(self) -> str:
        """A failed audit in one line: what failed first, and how many."""
        failed = [c for c in self.cases if not c.passed]
        why = [self.error] if self.error else []
        if failed:
            first = failed[0]
            why.append(
                f"{len(failed)} of {len(self.cases)} sampled checkpoint(s) did not reproduce their loss curve "
                f"(first: step {first.step} of {first.lineage}: {first.what()})"
            )
        if not self.cases and not self.error:
            why.append(f"none of {self.certified} certified checkpoint(s) could be sampled")
        if not self.torn_down:
            why.append(f"cluster {self.cluster} NOT torn down")
        return f"audit {self.runbook} FAILED: " + "; ".join(why)

    def markdown(self) -> str:
        rows = "\n".join(
            f"| {'✅' if c.passed else '❌'} | {c.step} | {c.lineage} | `{c.uri}` | {c.what().replace('|', '/')} |"
            for c in self.cases
        )
        return (
            f"# Checkpoint audit of `{self.runbook}`: {'passed' if self.passed else 'FAILED'}\n\n"
            f"{len(self.cases)} of {self.certified} certified checkpoints, seed `{self.seed}`, "
            f"cluster `{self.cluster}` (torn down: {self.torn_down}).\n\n"
            + (f"**Error:** {self.error}\n\n" if self.error else "")
            + f"| | step | lineage | checkpoint | loss curve |\n|---|---|---|---|---|\n{rows}\n"
        )


def auditable(step: int, curve: Curve | None) -> bool:
    """Whether a checkpoint can be audited now: its lineage logged a step after it, or its
    lineage's curve is missing (then it is sampled, and fails saying so)."""
    return curve is None or not curve.losses or max(curve.losses) > step


def sample(items: Sequence[Any], k: int, seed: int | str) -> list[Any]:
    """`k` of `items` (all when fewer), chosen by `seed`, oldest step first."""
    chosen = random.Random(seed).sample(list(items), min(k, len(items)))
    return sorted(chosen, key=lambda c: c.step)


def audit_checkpoints(
    compute,
    cluster: str,
    option,
    job,
    checkpoints: Sequence[Any],
    curves: Mapping[str, Curve],
    lineages: Mapping[str, str],
    *,
    steps: int,
    tolerance: float,
    timeout_s: float,
    scratch: str,
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[AuditCase], bool, str]:
    """Load each checkpoint on one cluster, run `steps` steps, compare with the curve of its
    lineage (`lineages`: checkpoint URI -> lineage; `curves`: lineage -> its curve).

    Returns (cases, torn_down, error). The cluster is torn down in any case."""
    from dataclasses import replace

    cases: list[AuditCase] = []
    error = ""
    job = replace(job, env={**job.env, AUDIT_DIR_ENV: scratch})
    try:
        compute.launch(cluster, option)
        for ckpt in checkpoints:
            lineage = lineages.get(ckpt.uri, ORIGINAL_LINEAGE)
            cases.append(
                _audit_one(
                    compute,
                    cluster,
                    job,
                    ckpt,
                    lineage,
                    curves.get(lineage),
                    steps,
                    tolerance,
                    timeout_s,
                    poll_s,
                    clock,
                )
            )
    except LifeboatError as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        torn_down = True
        try:
            compute.teardown(cluster)
            torn_down = cluster not in compute.clusters()
        except Exception as e:  # say so: a cluster left behind costs money
            torn_down, error = False, error or f"teardown failed: {e}"
    return cases, torn_down, error


def _audit_one(
    compute, cluster, job, ckpt, lineage, curve, steps, tolerance, timeout_s, poll_s, clock
) -> AuditCase:
    if curve is None or not curve.losses:
        where = f" ({curve.source})" if curve is not None else ""
        return AuditCase(ckpt.step, ckpt.uri, None, f"no loss log of lineage {lineage} found{where}", lineage)
    recorded = curve.losses
    wanted = [s for s in range(ckpt.step + 1, ckpt.step + steps + 1) if s in recorded]
    if not wanted:
        return AuditCase(ckpt.step, ckpt.uri, None, f"{curve.source} has no step after {ckpt.step}", lineage)
    compute.run(cluster, job.resuming_from(ckpt.uri))
    deadline = clock() + timeout_s
    while True:
        logged = parse_losses(compute.logs(cluster))
        finished = compute.status(cluster).job.finished
        if all(s in logged for s in wanted) or finished or clock() > deadline:
            break
        time.sleep(poll_s)
    parity = loss_parity(recorded, logged, ckpt.step, steps, tolerance)
    return AuditCase(ckpt.step, ckpt.uri, parity, lineage=lineage)


def choose_option(compute, candidates, blocked: Sequence[str] = ()):
    """The first feasible place the runbook's compute offers."""
    options = [o for o in compute.plan(candidates, blocked) if o.feasible]
    if not options:
        raise StopFailover("no feasible place for the audit cluster")
    return options[0]
