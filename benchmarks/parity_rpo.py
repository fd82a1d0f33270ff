"""Loss parity against RPO (issue #34): where the failover resumes, and what its proof says,
for outages at random points of the checkpoint interval.

The demo runbook in a sandbox, the real trainer, local compute, `file://` stores, the walker
on threads. Each run trains the primary to a random step in the interval after checkpoint 40
(checkpoints every 5 steps, all replicated), then fails over. Two loss-log cadences:
`with checkpoints` (the log travels with the replication pass: it ends at the newest
checkpoint's step, as `replicate` copies it) and `every step` (it ends where the primary
died). Printed per cadence: the checkpoint resumed from, steps lost (outage step minus it;
at the demo's 0.4 s a step that is the RPO's share the parity gate decides), the parity
outcomes, and the wall time from approval to the proof. Runs on whichever Lifeboat is
installed: `python benchmarks/parity_rpo.py` with main's interpreter measures main.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

RUNS = 4 if os.environ.get("LIFEBOAT_BENCH_QUICK") else 20
EVERY, NEWEST, STEP_S = 5, 40, 0.4
CADENCES = ("with checkpoints", "every step")


class Approve:
    """The approval gate, approving at once."""

    def request(self, card, ledger):
        from lifeboat_dr.providers.chat.base import ApprovalDecision

        self.card = card
        ledger.mark("approval_requested")
        ledger.mark("approval_granted")
        return ApprovalDecision(approved=True, reason="benchmark", approver="U-bench")

    def notify(self, text):
        pass

    def announce(self):
        pass


def outcome_of(entry) -> str:
    """passed / mismatch / not provable (main's entries carry only the note)."""
    record = getattr(entry, "parity", None)
    if record is not None:
        how = f" by replay of {record.replayed_from}" if record.replayed_from is not None else ""
        return f"{record.outcome}{how}"
    if entry.outcome != "completed":
        return f"run {entry.outcome}"
    return "passed" + (" after rollback" if "rollback" in entry.notes else "")


def one_run(root: Path, seed: int, cadence: str) -> dict:
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.failover.walk import execute
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.flows.sandbox import sandbox_images, sandbox_of, sandboxed
    from lifeboat_dr.flows.wiring import build_steps, new_ledger, open_sites, providers_for, settings_for
    from lifeboat_dr.providers.image_registry import FakeRegistry
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.standins.trainer.core import Trainer

    died = NEWEST + random.Random(seed).randrange(EVERY)  # 40..44: a random point of the interval
    name = f"run-{seed}"
    rb = sandboxed(load_runbook(Path(__file__).resolve().parents[1] / "runbooks" / "demo.yaml"), name,
                   root=root, history=False)  # fmt: skip
    box = sandbox_of(name, root)
    Trainer(box.primary, box.pre_failure_log).run(died, EVERY)
    primary, secondary = open_sites(rb)
    replicate_checkpoints(
        primary, secondary, stored_checkpoints(primary, "manifest"), rpo_target=rb.rpo_target
    )
    if cadence == "with checkpoints":  # the log as the replication pass copied it
        lines = box.pre_failure_log.read_text().splitlines()
        box.pre_failure_log.write_text(
            "".join(f"{ln}\n" for ln in lines if all(s <= NEWEST for s in parse_losses(ln)))
        )
    providers = providers_for(rb, registry=FakeRegistry(sandbox_images(rb)))
    steps = build_steps(rb, run_id=name, providers=providers, evidence=["benchmark: outage"])
    ledger, gate = new_ledger(rb, name), Approve()
    started = time.perf_counter()
    try:
        entry = execute(settings_for(rb), steps, ledger, gate, run_id=name, drill=True)
    except Exception:
        entry = ledger.entry
    finally:
        for cluster in providers.compute.clusters():
            providers.compute.teardown(cluster)
    card_step = int(gate.card.checkpoint.split("(step ")[1].split(",")[0])
    resumed = entry.checkpoint_step
    return {
        "died": died,
        "card": card_step,
        "resumed": resumed,
        "lost": died - resumed if resumed is not None else None,
        "outcome": outcome_of(entry),
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    print(f"{RUNS} runs per cadence; checkpoints every {EVERY} steps, newest {NEWEST}; outage at a random step "
          f"{NEWEST}..{NEWEST + EVERY - 1}; {STEP_S}s a step (the demo's)")  # fmt: skip
    print("| loss log reaches the secondary | resumed from (runs) | steps lost, mean (max) | RPO share, mean | "
          "card = ledger | parity outcomes | failover wall s, mean |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="lifeboat-parity-bench-") as tmp:
        for cadence in CADENCES:
            runs = [one_run(Path(tmp) / cadence.replace(" ", "-"), seed, cadence) for seed in range(RUNS)]
            lost = [r["lost"] for r in runs if r["lost"] is not None]
            resumed = Counter(r["resumed"] for r in runs)
            outcomes = Counter(r["outcome"] for r in runs)
            same = sum(r["card"] == r["resumed"] for r in runs)
            print(
                f"| {cadence} | {', '.join(f'{k}: {v}' for k, v in sorted(resumed.items(), key=str))} "
                f"| {statistics.mean(lost):.1f} ({max(lost)}) | {statistics.mean(lost) * STEP_S:.2f}s "
                f"| {same}/{len(runs)} | {', '.join(f'{k}: {v}' for k, v in sorted(outcomes.items()))} "
                f"| {statistics.mean(r['seconds'] for r in runs):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
