"""`make demo DEMO_ARGS=--fleet`: a region goes, six runbooks fail at once, and the secondary is too small for all.

Six sandboxed runbooks, copies of the shipped examples written under `.lifeboat/fleet-demo/`,
each with its primary in aws/us-east-1, candidates in gcp/us-central1 and a `fleet:` section
declaring the secondary's pre-approved quota there (96 H100, 160 A100-80GB: 256 GPUs for the
336 lost). First each runbook is planned alone, as each failover would plan today: together
they book GPUs the secondary does not have. Then the fleet plan (core/fleet, the one
`lifeboat capacity` prints): realtime inference first, then priority, then the cost of
waiting (GPUs x $/h); a job may be downgraded to another GPU type it lists; what cannot be
placed waits, with its expected wait and what each hour of it costs. The fine-tuning run has
30 minutes left (the demo says so: runbooks do not declare it), so the job behind it is given
its GPUs then; the one still waiting when the primary is due back (4 h) resumes at home.
Nothing is launched. Then the `fleet-failover` flow rehearses it in dry run, on a temporary
Prefect server: one card listing every job, one decision (the console's, in a rehearsal), each
placed runbook's own failover in its own sandbox, and the fleet's ledger entry (which jobs met
their class RTO). `--plan-only` stops after the plan. Exit 0 when the fleet plan stays within
the quota and every placed job's failover completed.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import replace
from pathlib import Path

import yaml

from lifeboat_dr.demo.home import enter

DEMO = Path(".lifeboat/fleet-demo")
LOST, SECONDARY = "aws/us-east-1", "gcp/us-central1"
QUOTA = {"H100": 96, "A100-80GB": 160}
RECOVERY_S = 4 * 3600.0
ENDS_IN_S = {"mistral-7b-sft": 30 * 60.0}  # a fine-tuning run near its end

# name: (shipped example, GPUs, $/GPU-h, GPU types in the runbook's order)
FLEET = {
    "chat-serving": ("chat-serving", 16, 4.0, ("H100",)),
    "llama-70b-pretrain": ("llama-70b-pretrain", 128, 3.8, ("H100", "A100-80GB")),
    "llama-8b-pretrain": ("llama-70b-pretrain", 64, 3.8, ("H100", "A100-80GB")),
    "mistral-7b-dpo": ("mistral-7b-sft", 64, 2.5, ("H100", "A100-80GB")),
    "mistral-7b-sft": ("mistral-7b-sft", 32, 2.5, ("H100", "A100-80GB")),
    "batch-embed": ("batch-embed", 32, 1.5, ("A100-80GB",)),
}


def say(text: str = "") -> None:
    print(f"[lifeboat fleet demo] {text}" if text else "", flush=True)


def sandboxed_runbooks(folder: Path) -> list[Path]:
    """The six runbooks, each an example with this outage's sites, size, price and quota."""
    from lifeboat_dr.runbooks.examples import examples

    shipped = examples()
    (folder / "jobs").mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (example, gpus, price, gpu_types) in FLEET.items():
        source = shipped[example]
        doc = yaml.safe_load(source.read_text())
        task = doc["job"].get("task")
        if task:
            shutil.copy(source.parent / task, folder / task)
        doc["name"] = name
        doc["primary"] = {**doc["primary"], "infra": LOST}
        per_node = 4 if gpus < 8 else 8
        doc["secondary"] = {
            **doc["secondary"],
            "infra": SECONDARY,
            "candidates": [{"infra": SECONDARY, "accelerators": f"{g}:{per_node}"} for g in gpu_types],
        }
        doc["cluster"] = {
            **doc.get("cluster", {"gpu_mtbf": "50000h", "checkpoint_write": "1m"}),
            "gpus": gpus,
            "gpu_hour_usd": price,
        }
        doc["fleet"] = {
            "quota": [{"infra": SECONDARY, "accelerator": g, "gpus": n} for g, n in QUOTA.items()]
        }
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make demo DEMO_ARGS=--fleet", description=__doc__.splitlines()[0])
    p.add_argument("--fleet", action="store_true", help="(selects this demo from lifeboat_dr.demo.training)")
    p.add_argument("--plan-only", action="store_true", help="stop after the plan: no fleet failover dry run")
    args = p.parse_args(argv)

    from lifeboat_dr.core.fleet.capacity import combined_quota, domain_capacity
    from lifeboat_dr.core.fleet.plan import plan_fleet
    from lifeboat_dr.flows.fleet_inputs import declared_quota, fleet_job
    from lifeboat_dr.runbooks.loader import load_runbook

    enter()
    shutil.rmtree(DEMO, ignore_errors=True)
    paths = sandboxed_runbooks(DEMO / "runbooks")
    runbooks = [load_runbook(path) for path in paths]
    jobs = [replace(job, runtime_left_s=ENDS_IN_S.get(job.name)) for job in map(fleet_job, runbooks)]
    quota, _ = combined_quota(q for rb in runbooks for q in declared_quota(rb))
    lost = sum(j.gpus for j in jobs)
    say(f"{LOST} is lost: {len(jobs)} runbooks, {lost} GPUs, fail over at once ({DEMO / 'runbooks'})")
    for j in jobs:
        wants = ", then ".join(c.accelerator for c in j.candidates)
        say(f"  {j.name:20s} {j.workload:18s} {j.gpus:4d} GPUs, wants {wants}, ${j.gpu_hour_usd:.2f}/GPU-h")
    say(f"the secondary's declared quota in {SECONDARY}: " + ", ".join(f"{n} {g}" for g, n in QUOTA.items()))
    say()

    booked: dict = {}
    for j in jobs:  # each failover alone sees the whole quota as its own
        (alone,) = plan_fleet([j], quota).placed() or [None]
        if alone is not None:
            booked[alone.place] = booked.get(alone.place, 0) + alone.gpus
    say("planned alone, as each failover would today:")
    for place, n in sorted(booked.items()):
        say(
            f"  {place}: {n} GPUs booked of {quota.get(place, 0)}"
            + (" (over)" if n > quota.get(place, 0) else "")
        )
    over = sum(max(0, n - quota.get(place, 0)) for place, n in booked.items())
    say(f"  {over} GPUs booked past the quota: launches the secondary refuses, mid-outage")
    say()

    outage = domain_capacity(jobs, quota, LOST, recovery_s=RECOVERY_S)
    plan = outage.plan
    say("the fleet plan (realtime first, then priority, then GPUs x $/h of lost compute):")
    for placement in plan.placements:
        say(f"  {placement.order + 1}. {placement.describe()}")
    used = plan.used()
    say(
        f"{len(plan.placed())} placed now ({sum(1 for x in plan.placed() if x.downgraded)} downgraded), "
        f"{len(plan.waiting())} wait; in use now: "
        + ", ".join(f"{place} {used.get(place, 0)} of {n}" for place, n in sorted(quota.items()))
    )
    within = all(used.get(place, 0) <= n for place, n in quota.items())
    say(
        f"50% minimum: {outage.quota_gpus} GPUs of quota for the {outage.primary_gpus} lost: "
        + ("met" if outage.covers_minimum else "NOT MET")
    )
    if not within:
        say("demo FAILED: past the quota")
        return 1
    say("the fleet plan stays within the quota")
    if not args.plan_only and not rehearse(paths):
        say("demo FAILED: a placed job's failover did not complete")
        return 1
    say("demo passed" + (": the fleet plan stays within the quota" if args.plan_only else ""))
    return 0


def rehearse(paths: list[Path]) -> bool:
    """The fleet failover of `paths` in dry run, on a temporary Prefect server; True when every
    placed job's failover completed."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_ALLOW_EPHEMERAL_MODE,
        temporary_settings,
    )

    say()
    say("the fleet failover, in dry run: one card, one decision, each placed job's own failover")
    home = (DEMO / "prefect").resolve()
    home.mkdir(parents=True, exist_ok=True)
    ledger = os.environ.get("LIFEBOAT_LEDGER")
    os.environ["LIFEBOAT_LEDGER"] = str((DEMO / "ledger.jsonl").resolve())  # fleet.jsonl beside it
    settings = {PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: True, PREFECT_HOME: str(home)}
    try:
        with temporary_settings(updates=settings, restore_defaults={PREFECT_API_URL}):
            from lifeboat_dr.flows.fleet_failover import fleet_failover

            runs = [str(p) for p in paths]
            state = fleet_failover(runbooks=runs, dry_run=True, recovery="4h", return_state=True)
            result = state.result(raise_on_failure=False)
    finally:  # the caller's ledger as it was
        if ledger is None:
            del os.environ["LIFEBOAT_LEDGER"]
        else:
            os.environ["LIFEBOAT_LEDGER"] = ledger
    if not isinstance(result, dict):
        say(f"  the fleet failover ended {state.type.value}: {state.message}")
        return False
    for j in result["jobs"]:
        if j["rto_s"] is not None:
            met = "met" if j["met"] else "MISSED"
            how = f"RTO {j['rto_s']:.0f}s against {j['rto_target_s']:.0f}s: {met}"
        else:
            how = "expected wait " + (
                f"{j['expected_wait_s'] / 3600:.1f}h" if j["expected_wait_s"] else "unknown"
            )
        say(f"  {j['runbook']}: {j['outcome']}, {how}")
    say(f"fleet ledger {DEMO / 'fleet.jsonl'}: {result['fleet']}, {result['decision'][:80]}")
    return state.is_completed()
