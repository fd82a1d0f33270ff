"""Drills of detection: the primary process killed, a GPU fallen off the bus. See __init__.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from lifeboat_dr.flows.drills.base import (
    SANDBOX_JOB_STEPS,
    Check,
    Outcome,
    Rig,
    amend,
    completed,
    simulated_outage,
    utcnow,
)
from lifeboat_dr.runbooks.model import Runbook

# -- process-kill --------------------------------------------------------------------------


def prepare_process_kill(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.sandbox import sandbox_of
    from lifeboat_dr.flows.wiring import open_sites
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    job = trainer_job(rig.trainer)
    box = sandbox_of(rig.drill_id, rig.root.parent)  # empty sites (history=False): this drill lives it
    heartbeat = box.root / "primary-heartbeat.json"
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
    reference = job.start(  # meanwhile, the same job uninterrupted: what the resumed losses must equal
        steps=SANDBOX_JOB_STEPS,
        every=every,
        ckpt_dir=box.root / "reference",
        loss_log=box.root / "reference-loss.jsonl",
        heartbeat=box.root / "reference-heartbeat.json",
    )
    rig.processes.append(reference)
    rig.facts["reference"] = reference
    proc = job.start(
        steps=1000,
        every=every,
        ckpt_dir=box.primary,
        loss_log=box.pre_failure_log,
        heartbeat=heartbeat,
        step_seconds=step_s,
    )
    rig.processes.append(proc)
    deadline = time.monotonic() + 120  # torchrun starts three interpreters that import torch
    while _last_step(box.pre_failure_log) < kill_at:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the primary trainer stopped or stalled before step {kill_at}")
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    killed_at = utcnow()
    rig.facts.update(kill_at=kill_at, killed_step=_last_step(box.pre_failure_log), returncode=proc.returncode)

    primary, secondary = open_sites(rig.rb)  # replication caught up to the kill
    replicate_checkpoints(
        primary, secondary, stored_checkpoints(primary, job.layout), rpo_target=rig.rb.rpo_target
    )

    decision = _watch_until_confirmed(rig.rb, timeout_s=float(options.get("detect_timeout_s", 10)))
    rig.facts.update(decision=decision, detect_s=(decision.at - killed_at).total_seconds())
    # No evidence handed over: the failover's own confirm step runs the probes and quorum again.


def _watch_until_confirmed(rb: Runbook, *, timeout_s: float, poll_s: float = 0.2):
    """The watch flow's loop, in process: probe, decide, until the quorum confirms."""
    from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy, decide
    from lifeboat_dr.flows.wiring import build_probes

    probes, policy = build_probes(rb), QuorumPolicy.from_detection(rb.detection)
    latest: dict[str, Any] = {}
    decision = None
    start = time.monotonic()
    while True:
        for p in probes:
            r = p.check(latest.get(p.source))
            latest[r.source] = r
        decision = decide(latest.values(), utcnow(), policy, decision)
        if decision.state is OutageState.confirmed or time.monotonic() - start > timeout_s:
            return decision
        time.sleep(poll_s)


def verify_process_kill(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.flows.sandbox import sandbox_of
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    job = trainer_job(rig.trainer)
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
        completed(outcome),
    ]
    newest = job.newest_committed(box.primary)
    report = outcome.steps.get("certify")
    certified = report.certified if report is not None else None
    expected = int(newest.name.split("-")[1]) if newest else None
    checks.append(
        Check(
            "resumed from the newest certified checkpoint",
            certified is not None and certified.step == expected,
            f"resumed from step {getattr(certified, 'step', None)}, newest committed on the primary {expected}",
        )
    )
    try:
        code = f["reference"].wait(timeout=180)
    except subprocess.TimeoutExpired:
        code = None
    if code != 0:
        checks.append(Check("the uninterrupted reference run finished", False, f"exit {code}"))
    uninterrupted = parse_losses((box.root / "reference-loss.jsonl").read_text()) if code == 0 else {}
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
    from lifeboat_dr.core.resume import parse_losses

    try:
        return max(parse_losses(log.read_text()), default=0)
    except FileNotFoundError:
        return 0


# -- gpu-fault -----------------------------------------------------------------------------


def prepare_gpu_fault(rig: Rig, options: Mapping[str, Any]) -> None:
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
    simulated_outage(rig, *(f"{r.signal}: {r.summary}" for r in decision.evidence))


def gpu_fault_detection(rb: Runbook, heartbeat: Path, *, xid: int, stall_s: float) -> dict[str, Any]:
    """Real probes over an NVML fake: the XID alone, the stall alone, then both together."""
    from lifeboat_dr.core.detection.probes import GpuHealthReadingProbe, TrainingProgressProbe, file_heartbeat
    from lifeboat_dr.core.detection.quorum import QuorumPolicy, decide
    from lifeboat_dr.providers.health.fake import FakeGpu, FakeNvml
    from lifeboat_dr.providers.health.nvml import NvmlHealth

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
    now = utcnow()
    return {
        "gpu": gpu,
        "alive": alive,
        "stalled": stalled,
        "xid_alone": decide([gpu, alive], now, policy),
        "stall_alone": decide([gpu_ok, stalled], now, policy),
        "both": decide([gpu, stalled], now, policy),
        "xid": xid,
    }


def verify_gpu_fault(rig: Rig, outcome: Outcome) -> list[Check]:
    return gpu_fault_checks(rig.facts) + [
        _evidence_names_xid(outcome.steps.get("confirm"), rig.facts["xid"]),
        completed(outcome),
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
