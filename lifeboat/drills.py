"""Drills: break one thing on purpose, in a sandbox, and prove the failover coped.

Each kind is two halves: how to inject its fault into a sandboxed copy of the runbook
(`prepare`, before the failover) and the checks that prove the failover handled it
(`verify`, after). `run_drill` puts them around one failover run and returns a typed
`DrillResult`; a drill passes only when every check does.

    process-kill       the primary trainer (a real process) is SIGKILLed at a random step;
                       the real probes + quorum confirm; the secondary resumes from the
                       newest certified checkpoint with losses equal to an uninterrupted run
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

Drills never touch production: everything lives under `.lifeboat/sandbox/<drill id>/`
(`flows.sandbox`), the cluster is `cluster_name(rb, drill id)`, every drill ends with a
check that no cluster is left (tearing down any that is), and the ledger entry is marked
a drill with its kind. The failover itself is passed in (`FailoverRun`): `flows/drill.py`
runs the real `execute` inside a Prefect flow; everything here is plain Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lifeboat.errors import ConfigError, ProviderUnavailable
from runbooks.model import Runbook

KINDS = (
    "process-kill",
    "gpu-fault",
    "region-outage",
    "corrupted-replica",
    "approval-timeout",
    "stale-primary",
)
SCOPES = ("az", "region")

# The cloud the region drill pretends the primary lives in: a zone, its region, another
# region, another cloud. Prices are FakeCompute's list (see `PricedLocal`).
FAILED_REGION = "aws/us-east-1"
FAILED_ZONE = "aws/us-east-1/us-east-1a"
REGION_CANDIDATES = (FAILED_ZONE, "aws/us-east-1/us-east-1b", "aws/us-west-2", "gcp/us-central1")
REGION_PRICES = {"aws": 98.32, "gcp": 88.49}
SANDBOX_JOB_STEPS = 50  # the sandbox job trains to step 50 (flows.sandbox: steps 40 + 2 x every 5)


def _now() -> datetime:
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
    primary: Any = None  # a Store replacing the sandbox primary (an outage), or None
    compute: Any = None  # a Compute replacing the sandbox's local one, or None
    evidence: list[str] | None = None  # None: the failover's confirm step runs the real probes
    outage_started_at: datetime | None = None
    detected_at: datetime | None = None
    approval: str = "approve"  # the console gate: approve at once, or wait (nobody answers)
    facts: dict[str, Any] = field(default_factory=dict)  # what the injection saw, for the checks
    processes: list[subprocess.Popen] = field(default_factory=list)  # stopped in any case

    @property
    def clusters_root(self) -> Path:
        return self.rb.base_dir / ".lifeboat" / "clusters"


@dataclass
class Outcome:
    """What the failover run left: its ledger entry, each step's result, its error."""

    entry: Any  # lifeboat.ledger.LedgerEntry
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


def run_drill(
    rb: Runbook,
    kind: str,
    *,
    failover: FailoverRun,
    scope: str | None = None,
    seed: int | str | None = None,
    root: Path | None = None,
    options: Mapping[str, Any] | None = None,
) -> DrillResult:
    """Sandbox `rb`, inject `kind`'s fault, run `failover`, check, tear down. Never raises
    for what the drill finds: a broken failover is a failed check."""
    from flows.sandbox import SANDBOX_ROOT, sandbox_of

    if kind not in DRILLS:
        raise ConfigError(f"unknown drill kind {kind!r}; use one of {', '.join(KINDS)} or all")
    if scope is not None and scope not in SCOPES:
        raise ConfigError(f"unknown drill scope {scope!r}; use az or region")
    drill_id = f"{kind}-{secrets.token_hex(4)}"
    box = sandbox_of(drill_id, root or SANDBOX_ROOT)
    started = time.monotonic()
    rig = Rig(kind, drill_id, rb, box.root, random.Random(seed if seed is not None else drill_id), scope)
    checks: list[Check] = []
    outcome: Outcome | None = None
    try:
        rig.rb = _sandbox(rb, drill_id, root or SANDBOX_ROOT)
        DRILLS[kind].prepare(rig, options or {})
        outcome = failover(rig)
        checks += DRILLS[kind].verify(rig, outcome)
        checks.append(_marked_drill(rig, outcome))
    except Exception as e:  # an injection or check that could not run is a failed drill
        checks.append(Check("drill ran to the end", False, f"{type(e).__name__}: {e}"))
    finally:
        for proc in rig.processes:
            _stop(proc)
        checks.append(_no_cluster_left(rig))
    return DrillResult(
        kind=kind,
        passed=bool(checks) and all(c.ok for c in checks),
        checks=tuple(checks),
        run_id=drill_id,
        outcome=outcome.outcome if outcome else None,
        seconds=time.monotonic() - started,
        scope=rig.scope,
    )


# -- sandbox helpers ---------------------------------------------------------------------


def _sandbox(rb: Runbook, drill_id: str, root: Path) -> Runbook:
    from flows.sandbox import sandboxed

    return sandboxed(rb, drill_id, root=root)


def amend(rb: Runbook, **sections: dict[str, Any] | Any) -> Runbook:
    """A copy of `rb` with sections merged (dicts) or replaced (anything else); same folder."""
    doc = rb.model_dump(mode="json")
    for key, value in sections.items():
        doc[key] = {**(doc.get(key) or {}), **value} if isinstance(value, dict) else value
    new = Runbook.model_validate(doc)
    new._path = rb.path
    return new


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _no_cluster_left(rig: Rig) -> Check:
    """Guaranteed teardown: any cluster still held is named, then torn down."""
    from providers.compute.local import LocalCompute

    compute = LocalCompute(rig.clusters_root)
    left = compute.clusters()
    for name in left:
        compute.teardown(name)
    return Check("no cluster left behind", not left, f"left: {', '.join(left)}" if left else "torn down")


def _marked_drill(rig: Rig, outcome: Outcome) -> Check:
    entry = outcome.entry
    ok = entry is not None and entry.drill and entry.notes.get("drill") == rig.kind
    return Check("ledger entry marked as a drill", ok, f"run {rig.drill_id}" if ok else f"entry: {entry}")


def _completed(outcome: Outcome) -> Check:
    entry = outcome.entry
    detail = f"outcome {outcome.outcome}"
    if outcome.error is not None:
        detail += f" ({type(outcome.error).__name__}: {outcome.error})"
    elif entry is not None and entry.rto is not None:
        detail += f", RTO {entry.rto.total_seconds():.1f}s, RPO {entry.rpo.total_seconds():.1f}s"
    return Check("failover completed", outcome.outcome == "completed", detail)


def _simulated(rig: Rig, *lines: str) -> None:
    """The failover starts from evidence (as the watch automation would hand it over)."""
    now = _now()
    rig.evidence = list(lines) or [f"drill {rig.kind}: simulated outage"]
    rig.outage_started_at = rig.outage_started_at or now
    rig.detected_at = now


# -- process-kill --------------------------------------------------------------------------


def _prepare_process_kill(rig: Rig, options: Mapping[str, Any]) -> None:
    from flows.sandbox import sandbox_of
    from lifeboat.replication import open_sites, replicate_checkpoints, stored_checkpoints

    box = sandbox_of(rig.drill_id, rig.root.parent)
    for folder in (box.primary, box.secondary):  # the seeded history goes: this drill lives it
        shutil.rmtree(folder, ignore_errors=True)
    heartbeat = box.root / "primary-heartbeat.json"
    for f in (box.pre_failure_log, heartbeat):
        f.unlink(missing_ok=True)
    signals = [str(getattr(s, "value", s)) for s in rig.rb.detection.signals]
    signals += [s for s in ("training_progress", "checkpoint_freshness") if s not in signals]
    stall = float(options.get("stall_s", 1.0))
    rig.rb = amend(
        rig.rb,
        detection={"signals": signals, "heartbeat": str(heartbeat), "stall_after": f"{stall}s"},
        checkpoint={"cadence": f"{stall / 2}s", "freshness_factor": 2.0},
    )
    every, step_s = 5, float(options.get("step_seconds", 0.05))
    kill_at = rig.rng.randint(11, SANDBOX_JOB_STEPS - 16)  # room after it for the parity steps
    proc = subprocess.Popen(
        [sys.executable, "-m", "lifeboat.trainer", "--steps", "1000", "--every", str(every)]
        + ["--ckpt-dir", str(box.primary), "--loss-log", str(box.pre_failure_log)]
        + ["--heartbeat", str(heartbeat), "--step-seconds", str(step_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": _repo_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
        start_new_session=True,
    )
    rig.processes.append(proc)
    deadline = time.monotonic() + 60
    while _last_step(box.pre_failure_log) < kill_at:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the primary trainer stopped or stalled before step {kill_at}")
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    killed_at = _now()
    rig.facts.update(kill_at=kill_at, killed_step=_last_step(box.pre_failure_log), returncode=proc.returncode)

    primary, secondary = open_sites(rig.rb)  # replication caught up to the kill
    replicate_checkpoints(
        primary, secondary, stored_checkpoints(primary, "manifest"), rpo_target=rig.rb.rpo_target
    )

    decision, waited = _watch_until_confirmed(rig.rb, timeout_s=float(options.get("detect_timeout_s", 30)))
    rig.facts.update(decision=decision, detect_s=waited, killed_at=killed_at)
    # No evidence handed over: the failover's own confirm step runs the probes and quorum again.


def _watch_until_confirmed(rb: Runbook, *, timeout_s: float, poll_s: float = 0.2):
    """The watch flow's loop, in process: probe, decide, until the quorum confirms."""
    from flows.watch import build_probes
    from lifeboat.detection.quorum import OutageState, QuorumPolicy, decide

    probes, policy = build_probes(rb), QuorumPolicy.from_detection(rb.detection)
    latest: dict[str, Any] = {}
    decision = None
    start = time.monotonic()
    while True:
        for p in probes:
            r = p.check(latest.get(p.source))
            latest[r.source] = r
        decision = decide(latest.values(), _now(), policy, decision)
        waited = time.monotonic() - start
        if decision.state is OutageState.confirmed or waited > timeout_s:
            return decision, waited
        time.sleep(poll_s)


def _verify_process_kill(rig: Rig, outcome: Outcome) -> list[Check]:
    from flows.sandbox import sandbox_of
    from lifeboat.resume import parse_losses
    from lifeboat.trainer.core import Trainer, newest_committed

    box = sandbox_of(rig.drill_id, rig.root.parent)
    f = rig.facts
    decision = f["decision"]
    checks = [
        Check(
            "primary trainer SIGKILLed at a random step",
            f["returncode"] == -signal.SIGKILL,
            f"asked step {f['kill_at']}, died after step {f['killed_step']} (exit {f['returncode']})",
        ),
        Check(
            "detection confirmed the outage by quorum",
            str(decision.state) == "confirmed",
            f"{decision.summary} {f['detect_s']:.1f}s after the kill",
        ),
        _completed(outcome),
    ]
    newest = newest_committed(box.primary)
    certified = outcome.steps.get("certify")
    expected = int(newest.name.split("-")[1]) if newest else None
    checks.append(
        Check(
            "resumed from the newest certified checkpoint",
            certified is not None and certified.step == expected,
            f"resumed from step {getattr(certified, 'step', None)}, newest committed on the primary {expected}",
        )
    )
    Trainer(box.root / "reference", box.root / "reference-loss.jsonl").run(SANDBOX_JOB_STEPS, 5)
    uninterrupted = parse_losses((box.root / "reference-loss.jsonl").read_text())
    log = box.root / "secondary-loss.jsonl"
    resumed = parse_losses(log.read_text()) if log.exists() else {}
    checks.append(
        losses_equal(uninterrupted, resumed, getattr(certified, "step", 0), through=f["killed_step"])
    )
    return checks


def losses_equal(
    uninterrupted: Mapping[int, float], resumed: Mapping[int, float], after: int, *, through: int
) -> Check:
    """The resumed run's losses equal the uninterrupted run's, exactly, from `after`+1 on,
    reaching at least step `through` (the work the killed primary had done)."""
    steps = sorted(s for s in resumed if s > after)
    differ = [s for s in steps if uninterrupted.get(s) != resumed[s]]
    ok = bool(steps) and not differ and steps[-1] >= through
    if differ:
        s = differ[0]
        detail = f"step {s}: resumed {resumed[s]!r} vs uninterrupted {uninterrupted.get(s)!r}"
    elif not steps:
        detail = f"the resumed run logged no step after {after}"
    else:
        detail = f"steps {steps[0]}..{steps[-1]} identical ({len(steps)} steps, killed after {through})"
        if steps[-1] < through:
            detail += f"; but the resumed run stopped before step {through}"
    return Check("resumed losses equal an uninterrupted run's exactly", ok, detail)


def _last_step(log: Path) -> int:
    from lifeboat.resume import parse_losses

    try:
        return max(parse_losses(log.read_text()), default=0)
    except FileNotFoundError:
        return 0


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[1])


# -- gpu-fault -----------------------------------------------------------------------------


def _prepare_gpu_fault(rig: Rig, options: Mapping[str, Any]) -> None:
    heartbeat = rig.root / "primary-heartbeat.json"
    signals = [str(getattr(s, "value", s)) for s in rig.rb.detection.signals]
    signals += [s for s in ("gpu_health", "training_progress") if s not in signals]
    stall = float(options.get("stall_s", 1.0))
    rig.rb = amend(
        rig.rb, detection={"signals": signals, "heartbeat": str(heartbeat), "stall_after": f"{stall}s"}
    )
    rig.facts.update(gpu_fault_detection(rig.rb, heartbeat, xid=int(options.get("xid", 79)), stall_s=stall))
    decision = rig.facts["both"]
    rig.outage_started_at = decision.outage_started_at
    _simulated(rig, *(f"{r.signal}: {r.summary}" for r in decision.evidence))


def gpu_fault_detection(rb: Runbook, heartbeat: Path, *, xid: int, stall_s: float) -> dict[str, Any]:
    """Real probes over an NVML fake: the XID alone, the stall alone, then both together."""
    from lifeboat.detection.probes import GpuHealthReadingProbe, TrainingProgressProbe, file_heartbeat
    from lifeboat.detection.quorum import QuorumPolicy, decide
    from providers.health.fake import FakeGpu, FakeNvml
    from providers.health.nvml import NvmlHealth

    policy = QuorumPolicy.from_detection(rb.detection)
    sick = FakeNvml([FakeGpu() for _ in range(8)])
    sick.inject_xid(3, xid)  # GPU 3 fell off the bus (XID 79)
    healthy = FakeNvml([FakeGpu() for _ in range(8)])
    progress = TrainingProgressProbe(file_heartbeat(heartbeat), timedelta(seconds=stall_s))
    os.utime(heartbeat)  # the job is alive right now...
    alive = progress.check()
    gpu = GpuHealthReadingProbe(NvmlHealth(nvml=sick, host="drill-node-0")).check()
    gpu_ok = GpuHealthReadingProbe(NvmlHealth(nvml=healthy, host="drill-node-0")).check()
    time.sleep(stall_s + 0.2)  # ...and hangs with its GPU: no step since
    stalled = progress.check(alive)
    now = _now()
    return {
        "gpu": gpu,
        "alive": alive,
        "stalled": stalled,
        "xid_alone": decide([gpu, alive], now, policy),
        "stall_alone": decide([gpu_ok, stalled], now, policy),
        "both": decide([gpu, stalled], now, policy),
        "xid": xid,
    }


def _verify_gpu_fault(rig: Rig, outcome: Outcome) -> list[Check]:
    return gpu_fault_checks(rig.facts) + [
        _evidence_names_xid(outcome.steps.get("confirm"), rig.facts["xid"]),
        _completed(outcome),
    ]


def gpu_fault_checks(facts: Mapping[str, Any]) -> list[Check]:
    gpu, xid = facts["gpu"], facts["xid"]
    seen = [tuple(x) for x in gpu.evidence.get("xids", [])]
    return [
        Check(
            f"XID {xid} makes gpu_health fail",
            gpu.failing and any(x[1] == xid for x in seen),
            f"{gpu.status}: {gpu.summary}",
        ),
        Check(
            "the XID alone does not confirm",
            str(facts["xid_alone"].state) != "confirmed",
            facts["xid_alone"].summary,
        ),
        Check(
            "the stall alone does not confirm",
            str(facts["stall_alone"].state) != "confirmed",
            facts["stall_alone"].summary,
        ),
        Check(
            "XID + stalled heartbeat confirm",
            str(facts["both"].state) == "confirmed",
            facts["both"].summary,
        ),
    ]


def _evidence_names_xid(confirmation: Any, xid: int) -> Check:
    lines = list(getattr(confirmation, "evidence", ()))
    ok = any(f"XID {xid}" in line for line in lines)
    return Check("the failover's evidence names the XID", ok, " | ".join(lines) or "no evidence")


# -- region-outage -------------------------------------------------------------------------


class UnreachableStore:
    """The failed region's store: every call fails as a dead endpoint does (retryable)."""

    def __init__(self, uri: str):
        from providers.storage.local import LocalStore

        self.uri, self.capabilities = uri, LocalStore.capabilities

    def _down(self, *args, **kwargs):
        raise ProviderUnavailable(f"{self.uri}: connection refused (drill: the region is down)")

    list = head = read = put = delete = server_copy = _down


class PricedLocal:
    """Compute for the region drill: plans like a cloud, runs like the sandbox.

    `plan` is `FakeCompute`'s (a price list per cloud, the blocked infras excluded by the
    same `is_blocked` rule SkyPilot's planner is given) so the runbook's cloud-looking
    candidates are priced and the failed zone/region is refused; launch, run, logs and
    teardown are `LocalCompute`'s, so the job really resumes and proves its losses. (The
    SkyPilot offline optimizer would do for `plan` too, but importing `sky` costs seconds
    on two cores, and drills stay fast.)"""

    def __init__(self, local, prices: Mapping[str, float] = REGION_PRICES):
        from providers.compute.fake import FakeCompute

        self.local, self.planner = local, FakeCompute(prices=dict(prices))

    def plan(self, candidates, blocked=()):
        return self.planner.plan(candidates, blocked)

    def __getattr__(self, name: str):
        return getattr(self.local, name)


def _prepare_region_outage(rig: Rig, options: Mapping[str, Any]) -> None:
    from providers.compute.local import LocalCompute

    rig.scope = rig.scope or "region"
    failed = FAILED_ZONE if rig.scope == "az" else FAILED_REGION
    accelerators = rig.rb.secondary.candidates[0].accelerators if rig.rb.secondary.candidates else None
    rig.rb = amend(
        rig.rb,
        primary={"infra": failed},
        secondary={"candidates": [{"infra": i, "accelerators": accelerators} for i in REGION_CANDIDATES]},
    )
    rig.primary = UnreachableStore(rig.rb.store_uri(rig.rb.primary.store))
    rig.compute = PricedLocal(LocalCompute(rig.clusters_root))
    rig.facts.update(failed=failed)
    _simulated(
        rig,
        f"provider: {failed} unreachable (drill: {rig.scope} outage)",
        f"checkpoint_freshness: {rig.primary.uri} unreachable",
    )


def _verify_region_outage(rig: Rig, outcome: Outcome) -> list[Check]:
    certified, fenced = outcome.steps.get("certify"), outcome.steps.get("fence")
    provisioned = outcome.steps.get("provision")
    checks = plan_checks(
        outcome.steps.get("plan") or (),
        provisioned.option.infra if provisioned else None,
        rig.facts["failed"],
        rig.scope,
    )
    mode = getattr(certified, "mode", None)
    checks += [
        Check(
            "certification ran manifest-only with the source down",
            mode == "manifest-only-source-down",
            f"mode {mode}, step {getattr(certified, 'step', None)}",
        ),
        Check(
            "fenced on the secondary alone (the primary store is down)",
            fenced is not None and list(fenced.stores) == [rig.rb.store_uri(rig.rb.secondary.store)],
            f"lease epoch {getattr(fenced, 'epoch', None)} on {list(getattr(fenced, 'stores', ()))}",
        ),
        _completed(outcome),
    ]
    return checks


def plan_checks(options, chosen: str | None, failed: str, scope: str | None) -> list[Check]:
    """The plan never offers the failed infra; the chosen place fits the outage's scope."""
    from providers.compute.base import is_blocked

    offered = [o.infra for o in options]
    bad = [i for i in offered if is_blocked(i, [failed])]
    region = "/".join(failed.split("/")[:2])
    checks = [
        Check(
            f"the plan never offers the failed {scope or 'infra'} ({failed})",
            bool(offered) and not bad and chosen is not None and not is_blocked(chosen, [failed]),
            f"offered {offered}, provisioned on {chosen}" + (f"; offered blocked {bad}" if bad else ""),
        )
    ]
    if scope == "az":
        checks.append(
            Check(
                "a zone outage fails over within the region",
                chosen is not None and is_blocked(chosen, [region]),
                f"provisioned on {chosen}",
            )
        )
    elif scope == "region":
        checks.append(
            Check(
                "a region outage fails over out of the region",
                chosen is not None and not is_blocked(chosen, [region]),
                f"provisioned on {chosen}",
            )
        )
    return checks


# -- corrupted-replica ---------------------------------------------------------------------


def _prepare_corrupted_replica(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat.checkpoints.manifest import MANIFEST_NAME

    secondary = Path(rig.rb.store_uri(rig.rb.secondary.store).removeprefix("file://"))
    committed = sorted(p.parent for p in secondary.glob(f"step-*/{MANIFEST_NAME}"))
    if len(committed) < 2:
        raise RuntimeError(f"{secondary}: fewer than two committed replica checkpoints to drill with")
    corrupt = int(options.get("corrupt", 1))  # how many of the newest to corrupt (tests: 2)
    flipped = [flip_byte(_shards(d)[0], rig.rng) for d in committed[-corrupt:]]
    rig.facts.update(newest=_step_of(committed[-1]), previous=_step_of(committed[-2]), flipped=flipped)
    _simulated(rig)


def flip_byte(path: Path, rng: random.Random) -> tuple[str, int, int, int]:
    """Flip one bit of one byte (bit rot): same size. Returns (path, offset, size before, after)."""
    data = bytearray(path.read_bytes())
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    # A new file renamed over the old one: a replica may be a hard link to the primary's
    # shard (a local server-side copy), and only the replica may rot.
    tmp = path.with_name(f".tmp-flip-{path.name}")
    tmp.write_bytes(bytes(data))
    tmp.replace(path)
    return str(path), offset, len(data), path.stat().st_size


def _shards(checkpoint: Path) -> list[Path]:
    """The data files of a checkpoint folder: not its manifest, not a store's hidden sidecars."""
    from lifeboat.checkpoints.manifest import MANIFEST_NAME

    return sorted(p for p in checkpoint.iterdir() if p.name != MANIFEST_NAME and not p.name.startswith("."))


def _step_of(path: Path) -> int:
    return int(path.name.split("-")[1])


def _verify_corrupted_replica(rig: Rig, outcome: Outcome) -> list[Check]:
    certified = outcome.steps.get("certify")
    return corrupted_replica_checks(rig.facts, certified, outcome.entry) + [_completed(outcome)]


def corrupted_replica_checks(facts: Mapping[str, Any], certified: Any, entry: Any) -> list[Check]:
    newest, previous = facts["newest"], facts["previous"]
    rejected = list(getattr(certified, "rejected", ()))
    step = getattr(certified, "step", None)
    resumed = getattr(entry, "checkpoint", None) or ""
    return [
        Check(
            "the corrupted shard keeps its size",
            all(f[2] == f[3] for f in facts["flipped"]),
            "; ".join(f"{Path(f[0]).parent.name}/{Path(f[0]).name} byte {f[1]}" for f in facts["flipped"]),
        ),
        Check(
            "certification rejects it for its CRC",
            any(r.startswith(f"step {newest}: crc mismatch") for r in rejected),
            " | ".join(rejected) or "nothing rejected",
        ),
        Check(
            "certification falls back to the previous checkpoint",
            step == previous,
            f"certified step {step}, previous checkpoint {previous}",
        ),
        Check(
            "the failover resumes from it",
            resumed.rstrip("/").endswith(f"step-{previous:08d}"),
            resumed or "no checkpoint in the ledger",
        ),
    ]


# -- approval-timeout ----------------------------------------------------------------------


def _prepare_approval_timeout(rig: Rig, options: Mapping[str, Any]) -> None:
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
    _simulated(rig)


def _verify_approval_timeout(rig: Rig, outcome: Outcome) -> list[Check]:
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


def _prepare_stale_primary(rig: Rig, options: Mapping[str, Any]) -> None:
    _simulated(rig)


def _verify_stale_primary(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat.replication import open_sites

    primary, secondary = open_sites(rig.rb)
    fenced = outcome.steps.get("fence")
    checks = [_completed(outcome)]
    checks += stale_writer_checks(primary, secondary, stale_epoch=0, new_epoch=getattr(fenced, "epoch", None))
    return checks


def stale_writer_checks(primary, secondary, *, stale_epoch: int, new_epoch: int | None) -> list[Check]:
    """The old primary (still holding `stale_epoch`) writes a checkpoint and tries to commit
    it, on its own store and on the replica; both must refuse, and the replica not change."""
    from lifeboat.checkpoints.manifest import MANIFEST_NAME
    from lifeboat.errors import StopFailover
    from lifeboat.fencing import check_lease, guarded_commit
    from lifeboat.trainer.core import checkpoint_name

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


DRILLS: dict[str, Drill] = {
    "process-kill": Drill(_prepare_process_kill, _verify_process_kill),
    "gpu-fault": Drill(_prepare_gpu_fault, _verify_gpu_fault),
    "region-outage": Drill(_prepare_region_outage, _verify_region_outage),
    "corrupted-replica": Drill(_prepare_corrupted_replica, _verify_corrupted_replica),
    "approval-timeout": Drill(_prepare_approval_timeout, _verify_approval_timeout),
    "stale-primary": Drill(_prepare_stale_primary, _verify_stale_primary),
}


def kinds_for(kind: str) -> tuple[str, ...]:
    """`all` or one kind, checked."""
    if kind == "all":
        return KINDS
    if kind not in DRILLS:
        raise ConfigError(f"unknown drill kind {kind!r}; use one of {', '.join(KINDS)} or all")
    return (kind,)


def results_json(results: list[DrillResult]) -> str:
    return json.dumps([r.to_dict() for r in results], indent=2)
