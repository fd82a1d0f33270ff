"""Drills of the training guard (torch job): a silent NCCL hang and a CUDA error. See __init__.py.

    nccl-hang   rank 1 of the primary's torchrun job is SIGSTOPped (raising nothing, as a
                suspended network interface or a hung NCCL kernel would), as a step or a
                periodic checkpoint save begins (option `hang_in`: step or save; by default
                the drill's seed picks; the rank stops itself there, `$LIFEBOAT_INJECT`, so a
                loaded machine cannot move the hang into the next step): the guard's watchdog stops the job within its bound
                (exit 83), names rank 1 in its event and dumps rank 0's stacks; the ladder's
                restart rung runs the job again on its cluster from the newest committed
                periodic checkpoint, with losses equal to an uninterrupted run
    cuda-error  every rank raises a CUDA error at a random step: the guard writes an
                emergency checkpoint of the step before (its commit record says so), exits
                81; a CUDA error poisons the device (`ladder.first_rung`), so the ladder
                starts at relaunch-without-node: the cluster torn down and launched again,
                resuming from that very checkpoint, exactly

The primary is a local-compute cluster (`<runbook>-primary`) running the job as the ladder
launches it (`flows.recovery.primary_job`); its guard events go to a file in the sandbox
(`FileEvents`). The recovery is the `recover` flow's walk (`core.guard.recovery.Walk`) over
the drill's ladder (`LADDER`: restart, relaunch-without-node, then the drill's failover,
from the event as its evidence, if both fail); its entries are marked drill, the ladder's run
id is `recovery-<drill id>`, and each rung's entry holds its RTO from the fault.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from lifeboat_dr.flows.drills.base import (
    SANDBOX_JOB_STEPS,
    Check,
    FailoverRun,
    Outcome,
    Rig,
    amend,
    simulated_outage,
    utcnow,
)
from lifeboat_dr.flows.drills.detection import _last_step, losses_equal

GUARD_KINDS = ("nccl-hang", "cuda-error")
EXITS = {"nccl-hang": 83, "cuda-error": 81}
RUNG = {"nccl-hang": "restart", "cuda-error": "relaunch-without-node"}  # where the ladder recovers each
FLOOR_S = 2.0  # the watchdog's floor in the sandbox: its steps take milliseconds
LADDER = {"rungs": [{"rung": "restart"}, {"rung": "relaunch-without-node"}, {"rung": "failover"}]}


def _local():
    from lifeboat_dr.providers.compute.base import PlanOption

    return PlanOption("local", None, None, False, None)


def prepare_guarded_fault(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.recovery import primary_job
    from lifeboat_dr.flows.sandbox import sandbox_of
    from lifeboat_dr.flows.wiring import open_sites
    from lifeboat_dr.providers.compute.local import LocalCompute
    from lifeboat_dr.providers.orchestrator.fake_events import FileEvents
    from lifeboat_dr.standins.trainer.jobs import rank_pid, trainer_job

    job = trainer_job(rig.trainer)
    box = sandbox_of(rig.drill_id, rig.root.parent)
    rig.rb = amend(
        rig.rb,
        primary={"cluster": f"{rig.rb.name}-primary"},
        job={"guard": {"hang_floor": f"{FLOOR_S:g}s"}},
        recovery=LADDER,
    )
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
    env = {"LIFEBOAT_GUARD_EVENTS": str(events.path)}
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
    compute, cluster = LocalCompute(rig.clusters_root), rig.rb.primary.cluster
    heartbeat = box.root / "primary-heartbeat.json"  # in the ranks' command lines: finds rank 1
    command = job.command(
        steps=1000, every=every, loss_log=box.pre_failure_log, heartbeat=heartbeat, step_seconds=step_s
    )
    launched = primary_job(rig.rb, rig.rb.store_uri(rig.rb.primary.store))
    compute.launch(
        cluster, _local(), replace(launched, command=command, env={**launched.env, **env})
    )  # the restart rung's job is the runbook's own: no injection, the sandbox's 50 steps
    deadline = time.monotonic() + 120  # torchrun starts three interpreters that import torch
    if rig.kind == "nccl-hang":  # rank 1 stops itself where the drill aimed (the fault)
        pid = None
        while (pid := pid or rank_pid(heartbeat, 1)) is None or not _stopped(pid):
            if compute.status(cluster).job.finished or time.monotonic() > deadline:
                raise RuntimeError(f"rank 1 of the primary trainer did not stop after step {fault_at}")
            time.sleep(0.01)
        rig.facts["stopped_pid"] = pid
    else:
        while _last_step(box.pre_failure_log) < fault_at - 1:  # the CUDA error comes in the next step
            if compute.status(cluster).job.finished or time.monotonic() > deadline:
                raise RuntimeError(f"the primary trainer stopped or stalled before step {fault_at - 1}")
            time.sleep(0.01)
    started, rig.outage_started_at = time.monotonic(), utcnow()  # the fault (within a step)
    end_by = time.monotonic() + float(options.get("end_timeout_s", 180))
    while not (status := compute.status(cluster)).job.finished:
        if time.monotonic() > end_by:
            raise RuntimeError("the guard did not end the primary's job")
        time.sleep(0.05)
    rig.facts.update(
        fault_at=fault_at,
        hang_in=hang_in,
        returncode=status.returncode,
        ended_after_s=time.monotonic() - started,
        last_step=_last_step(box.pre_failure_log),
        events=events.read(unique=True),
        log=compute.logs(cluster),
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


def recover_guarded_fault(rig: Rig, failover: FailoverRun) -> Outcome:
    """The `recover` flow's walk for the guard's event over the sandbox's primary cluster: the
    drill's ladder, `failover` as its last rung. The Outcome's entry is the ladder's."""
    from lifeboat_dr.core.guard.ladder import fault_from_event
    from lifeboat_dr.core.guard.recovery import ComputeRungs, Ledgers, Walk
    from lifeboat_dr.flows.recovery import newest_committed, primary_job, rung_settings
    from lifeboat_dr.flows.wiring import ledger_sink
    from lifeboat_dr.providers.compute.local import LocalCompute

    rb = rig.rb
    payload = (rig.facts["events"] or [{"payload": {}}])[0]["payload"]
    rungs = ComputeRungs(
        LocalCompute(rig.clusters_root),
        rb.primary.cluster,
        _local(),
        primary_job(rb, rb.store_uri(rb.primary.store)),
        lambda: newest_committed(rb),
        first_step=True,
    )
    steps: dict[str, Any] = {}

    def fail_over() -> tuple[str, str]:
        done = failover(rig)
        steps.update(done.steps)
        return rig.drill_id, str(done.outcome)

    ledgers = Ledgers(
        rb.name, ledger_sink(rb), rto_target=rb.rto_target, rpo_target=rb.rpo_target, drill=True
    )
    ledgers.open(f"recovery-{rig.drill_id}", "recovery").note("drill", rig.kind)  # the walk goes on from it
    error = None
    try:
        Walk(
            rig.drill_id,  # the ladder's run id: recovery-<drill id>
            fault_from_event(payload),
            rung_settings(rb),
            rungs,
            ledgers,
            outage_start=rig.outage_started_at or utcnow(),
            detected=rig.detected_at or utcnow(),
            failover=fail_over,
        ).run()
    except Exception as e:  # the checks judge it
        error = e
    return Outcome(ledgers.read(f"recovery-{rig.drill_id}"), steps, error)


def verify_guarded_fault(rig: Rig, outcome: Outcome) -> list[Check]:
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.flows.sandbox import sandbox_of
    from lifeboat_dr.flows.wiring import ledger_sink
    from lifeboat_dr.providers.compute.local import LocalCompute

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
    rung = RUNG[rig.kind]
    led = ledger_sink(rig.rb).entry(rig.rb.name, f"recovery-{rig.drill_id}.{rung}")
    uri = (led.notes.get("checkpoint") if led else None) or ""
    certified = int(uri.rstrip("/").rsplit("-", 1)[1]) if uri.rsplit("/", 1)[-1].startswith("step-") else None
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
    by = outcome.entry.notes.get("recovered_by") if outcome.entry is not None else None
    rto = f"RTO {led.rto.total_seconds():.1f}s from the fault" if led and led.rto else "no RTO"
    checks += [
        Check(
            f"recovered by the ladder's {rung} rung, on the primary's cluster",
            outcome.outcome == "completed" and by == rung and outcome.error is None,
            f"outcome {outcome.outcome}, recovered by {by}; {rto}"
            + (f" ({type(outcome.error).__name__}: {outcome.error})" if outcome.error else ""),
        ),
        Check(
            "resumed from the checkpoint the guard left",
            certified is not None and certified == expected,
            f"resumed from step {certified}, expected {expected}",
        ),
    ]
    code = f["reference"].wait(timeout=180)
    uninterrupted = parse_losses((box.root / "reference-loss.jsonl").read_text()) if code == 0 else {}
    compute, cluster = LocalCompute(rig.clusters_root), rig.rb.primary.cluster
    deadline = time.monotonic() + 180
    while cluster in compute.clusters() and not compute.status(cluster).job.finished:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    resumed = parse_losses(compute.logs(cluster)) if by in ("restart", "relaunch-without-node") else {}
    if cluster in compute.clusters():
        compute.teardown(cluster)  # the recovered job's cluster: the drill leaves none
    checks.append(losses_equal(uninterrupted, resumed, certified or 0, through=f["last_step"]))
    return checks
