"""Drills of the training guard (torch job): a silent NCCL hang and a CUDA error. See __init__.py.

    nccl-hang   rank 1 of the primary's torchrun job is SIGSTOPped (raising nothing, as a
                suspended network interface or a hung NCCL kernel would), as a step or a
                periodic checkpoint save begins (option `hang_in`: step or save; by default
                the drill's seed picks; the rank stops itself there, `$LIFEBOAT_INJECT`, so a
                loaded machine cannot move the hang into the next step): the guard's watchdog stops the job within its bound
                (exit 83), names rank 1 in its event and dumps rank 0's stacks; the failover
                resumes from the newest certified periodic checkpoint with losses equal to
                an uninterrupted run
    cuda-error  every rank raises a CUDA error at a random step: the guard writes an
                emergency checkpoint of the step before (its commit record says so), exits
                81; the failover certifies and resumes from that very checkpoint, exactly

The primary's guard events go to a file in the sandbox (`FileEvents`); the failover starts
from that event as its evidence. The smallest recovery (issue #33's ladder, `flows/recovery.py`)
is not walked here: the drill's recovery is the failover.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lifeboat_dr.flows.drills.base import (
    SANDBOX_JOB_STEPS,
    Check,
    Outcome,
    Rig,
    completed,
    simulated_outage,
    utcnow,
)
from lifeboat_dr.flows.drills.detection import _last_step, losses_equal

GUARD_KINDS = ("nccl-hang", "cuda-error")
EXITS = {"nccl-hang": 83, "cuda-error": 81}
FLOOR_S = 2.0  # the watchdog's floor in the sandbox: its steps take milliseconds


def prepare_guarded_fault(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.sandbox import sandbox_of
    from lifeboat_dr.flows.wiring import open_sites
    from lifeboat_dr.providers.orchestrator.fake_events import FileEvents
    from lifeboat_dr.standins.trainer.jobs import rank_pid, trainer_job

    job = trainer_job(rig.trainer)
    box = sandbox_of(rig.drill_id, rig.root.parent)
    every, step_s = 5, float(options.get("step_seconds", 0.05))
    fault_at = rig.rng.randint(11, SANDBOX_JOB_STEPS - 16)
    if (fault_at - 1) % every == 0:  # the step before is a periodic checkpoint: nothing to write
        fault_at += 1
    hang_in = (
        (options.get("hang_in") or rig.rng.choice(("step", "save"))) if rig.kind == "nccl-hang" else None
    )
    if hang_in == "save":  # rank 0 saves right after logging it
        fault_at = max(fault_at // every, 3) * every  # two saves measured: the saves' bound is warm
    elif hang_in == "step" and fault_at % every == 0:  # not right before a save
        fault_at += 1
    events = FileEvents(box.root / "guard-events.jsonl")
    env = {"LIFEBOAT_GUARD_EVENTS": str(events.path), "LIFEBOAT_HANG_FLOOR_S": str(FLOOR_S)}
    if rig.kind == "cuda-error":
        env["LIFEBOAT_INJECT"] = f"cuda-error@{fault_at}"
    elif hang_in == "save":
        env["LIFEBOAT_INJECT"] = f"stop-in-save@{fault_at}:1"
    else:
        env["LIFEBOAT_INJECT"] = f"stop@{fault_at + 1}:1"
    reference = job.start(
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
        heartbeat=box.root / "primary-heartbeat.json",
        step_seconds=step_s,
        log=box.root / "primary.log",
        env=env,
    )
    rig.processes.append(proc)
    deadline = time.monotonic() + 120  # torchrun starts three interpreters that import torch
    if rig.kind == "nccl-hang":  # rank 1 stops itself where the drill aimed (the fault)
        pid = None
        while (pid := pid or rank_pid(box.primary, 1)) is None or not _stopped(pid):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rank 1 of the primary trainer did not stop after step {fault_at}")
            time.sleep(0.01)
        rig.facts["stopped_pid"] = pid
    else:
        while _last_step(box.pre_failure_log) < fault_at - 1:  # the CUDA error comes in the next step
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the primary trainer stopped or stalled before step {fault_at - 1}")
            time.sleep(0.01)
    started = time.monotonic()  # the fault (within a step)
    code = proc.wait(timeout=float(options.get("end_timeout_s", 180)))
    rig.outage_started_at = utcnow()
    rig.facts.update(
        fault_at=fault_at,
        hang_in=hang_in,
        returncode=code,
        ended_after_s=time.monotonic() - started,
        last_step=_last_step(box.pre_failure_log),
        events=events.read(unique=True),
        log=(box.root / "primary.log").read_text(errors="replace"),
    )
    primary, secondary = open_sites(rig.rb)
    replicate_checkpoints(
        primary, secondary, stored_checkpoints(primary, job.layout), rpo_target=rig.rb.rpo_target
    )
    said = [f"guard: {e['payload']['kind']} at step {e['payload']['step']}, rank {e['payload']['rank']} "
            f"on {e['payload']['host']}: {e['payload']['detail']}" for e in rig.facts["events"]]  # fmt: skip
    simulated_outage(rig, *said)


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP: state T in /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def verify_guarded_fault(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.flows.sandbox import sandbox_of

    box = sandbox_of(rig.drill_id, rig.root.parent)
    f = rig.facts
    (event, *more) = f["events"] or [{"payload": {}}]
    payload = event["payload"]
    want = EXITS[rig.kind]
    checks = [
        Check(
            f"the guard ended the job with exit {want}",
            f["returncode"] == want and not more,
            f"exit {f['returncode']} {f['ended_after_s']:.1f}s after the fault; {len(f['events'])} event(s)",
        )
    ]
    report = outcome.steps.get("certify")
    certified = getattr(getattr(report, "certified", None), "step", None)
    if rig.kind == "nccl-hang":
        bound = payload.get("bound")
        checks += [
            Check(
                "the watchdog named the stopped rank within its bound",
                payload.get("kind") == "hang"
                and payload.get("rank") == 1
                and bound is not None
                and payload["elapsed"] <= bound + 0.5,
                f"stopped in a {f['hang_in']} after step {f['fault_at']}: {payload.get('detail', 'no event')}",
            ),
            Check(
                "rank 0's stacks were dumped",
                "Thread 0x" in f["log"]
                and ("save_checkpoint" if f["hang_in"] == "save" else "train_step") in f["log"],
            ),
        ]
        expected = payload.get("last_committed")
    else:
        marker = box.primary / f"step-{f['fault_at'] - 1:08d}" / "lifeboat-commit.json"
        record = json.loads(marker.read_text()).get("emergency", {}) if marker.exists() else {}
        checks.append(
            Check(
                "an emergency checkpoint of the step before the fault, committed as consistent",
                payload.get("emergency_checkpoint") == f["fault_at"] - 1 and record.get("consistent") is True,
                payload.get("checkpoint_note", "no event"),
            )
        )
        expected = f["fault_at"] - 1
    checks += [
        completed(outcome),
        Check(
            "resumed from the checkpoint the guard left",
            certified is not None and certified == expected,
            f"resumed from step {certified}, expected {expected}",
        ),
    ]
    code = f["reference"].wait(timeout=180)
    uninterrupted = parse_losses((box.root / "reference-loss.jsonl").read_text()) if code == 0 else {}
    log = box.root / "secondary-loss.jsonl"
    resumed = parse_losses(log.read_text()) if log.exists() else {}
    checks.append(losses_equal(uninterrupted, resumed, certified or 0, through=f["last_step"]))
    return checks
