"""Failover RTO against the step graph: a simulated failover on a real (temporary) Prefect
server, its steps taking scripted times (a real incident's proportions, scaled 1:200).

Prints measured RTO ÷ the graph's critical path (target ≤ 1.05: the flow adds little) and
÷ the sum of the steps (target ≤ 0.6 with early provisioning: concurrency pays).
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from benchmarks._goals import goal
from lifeboat_dr.core.failover.graph import critical_path, step_graph
from lifeboat_dr.flows.failover import execute
from lifeboat_dr.flows.wiring import new_ledger, settings_for
from lifeboat_dr.providers.chat.base import ApprovalDecision
from lifeboat_dr.testing.failover_steps import ScriptedSteps, scripted_runbook

SCALE = 1 / 200
# A 16-node pretraining failover, in seconds: detect 2m, certify 4m, prestage 8m (image pull and
# weights), approval 5m (a human), provision 12m, load a 70B checkpoint 4m, first step 1m.
INCIDENT = {
    "detect": 120, "confirm": 10, "fence": 5, "certify": 240, "plan": 30, "prestage": 480,
    "approval": 300, "provision": 720, "load": 240, "first_step": 60,
}  # fmt: skip


class ScriptedGate:
    """A person taking `seconds` to approve."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def request(self, card, ledger):
        ledger.mark("approval_requested")
        time.sleep(self.seconds)
        ledger.mark("approval_granted")
        return ApprovalDecision(approved=True, reason="bench", approver="bench")

    def notify(self, text):
        pass

    def announce(self):
        pass


def simulate(early: bool) -> tuple[float, float, float]:
    durations = {k: v * SCALE for k, v in INCIDENT.items()}
    rb = scripted_runbook(
        name="bench",
        workload="pretraining",
        approval={"required": False, "provision_before_approval": early},
    )
    steps = ScriptedSteps(durations)
    ledger = new_ledger(rb, "bench")

    @flow(name="failover-bench")
    def simulated():
        return execute(settings_for(rb), steps, ledger, ScriptedGate(durations["approval"]), run_id="bench")

    entry = simulated()
    # The graph's resume step is the fake's load + first step.
    graph_durations = {**durations, "resume": durations["load"] + durations["first_step"]}
    return (
        entry.rto.total_seconds(),
        critical_path(graph_durations, step_graph(early)),
        sum(durations.values()),
    )


def main() -> None:
    with prefect_test_harness(server_startup_timeout=120):
        simulate(False)  # warm-up: the first flow run pays for imports and client set-up
        print(
            f"{'policy':<28} {'RTO s':>7} {'critical s':>10} {'sum s':>7} {'RTO/critical':>13} {'RTO/sum':>8}"
        )
        goals = []
        for early, label in ((False, "approve, then provision"), (True, "provision before approval")):
            rto, crit, total = simulate(early)
            print(f"{label:<28} {rto:7.2f} {crit:10.2f} {total:7.2f} {rto / crit:13.3f} {rto / total:8.3f}")
            name = f"failover RTO, {label}"
            for over, base, bar in ((crit, "the critical path", 1.05), (total, "the sum of the steps", 0.6)):
                if bar >= 1 or early:  # concurrency pays only with provisioning before approval
                    figure = f"{rto:.2f} s ({rto / over:.3f}x)"
                    goals.append((name, rto / over <= bar, figure, f"{base} {over:.2f} s", f"<= {bar}x"))
    for args in goals:
        goal(*args)


if __name__ == "__main__":
    main()
