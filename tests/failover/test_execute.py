"""The failover flow's own logic on scripted steps, on a real Prefect server."""

from datetime import UTC, datetime, timedelta

import pytest
from prefect import flow

from flows.failover import execute
from lifeboat.errors import StopFailover
from lifeboat.failover_script import ScriptedSteps
from lifeboat.ledger import RtoLedger
from runbooks.model import Runbook

RUNBOOK = {
    "name": "job-a",
    "workload": "finetuning",
    "primary": {"infra": "aws/us-east-1", "store": "s3://p/ck"},
    "secondary": {
        "infra": "gcp/us-central1",
        "store": "gs://s/ck",
        "candidates": [{"infra": "gcp/us-central1"}],
    },
    "job": {"task": "task.yaml"},
    "checkpoint": {"cadence": "30m"},
    "failover": {"retries": 0},
}


class Gate:
    def __init__(self, approve=True):
        self.approve, self.cards, self.notes = approve, [], []

    def request(self, card, ledger):
        self.cards.append(card)
        ledger.mark("approval_requested")
        if self.approve:
            ledger.mark("approval_granted")
        else:
            ledger.fail("approval_granted", "rejected by U1", outcome="aborted")
        return type("D", (), {"approved": self.approve, "reason": "looks right", "approver": "U1"})()

    def notify(self, text):
        self.notes.append(text)


def run(steps, gate, rb=None, drill=False):
    rb = rb or Runbook.model_validate(RUNBOOK)
    ledger = RtoLedger.for_runbook(rb, "run-1", drill=drill)

    @flow
    def harness():
        return execute(rb, steps, ledger, gate, run_id="run-1", drill=drill)

    try:
        return harness(), ledger.entry
    except BaseException:
        return None, ledger.entry


@pytest.fixture(autouse=True)
def _server(prefect_server):
    yield


def test_certify_plan_and_prestage_run_concurrently_after_fencing():
    steps = ScriptedSteps({"certify": 0.3, "plan": 0.3, "prestage": 0.3})
    entry, _ = run(steps, Gate())
    assert entry.outcome == "completed"
    spans = {name: (start, end) for name, start, end in steps.calls}
    fence_end = spans["fence"][1]
    assert all(spans[b][0] >= fence_end for b in ("certify", "plan", "prestage"))
    latest_start = max(spans[b][0] for b in ("certify", "plan", "prestage"))
    earliest_end = min(spans[b][1] for b in ("certify", "plan", "prestage"))
    assert latest_start < earliest_end, "the three branches did not overlap"


def test_ledger_has_every_phase_in_order_and_the_card_shows_rpo_and_plan():
    gate = Gate()
    entry, _ = run(ScriptedSteps({}), gate)
    order = [
        "outage_start",
        "detected",
        "confirmed",
        "fenced",
        "approval_requested",
        "approval_granted",
        "provisioned",
        "checkpoint_loaded",
        "first_step",
        "parity_passed",
    ]
    times = [entry.phases[p] for p in order]
    assert times == sorted(times)
    card = gate.cards[0]
    assert card.checkpoint.startswith("memory://secondary/step-000300 (step 300, written ")
    assert card.rpo == timedelta(minutes=10)
    assert (
        dict(card.facts())["Plan"]
        == "gcp/us-central1 a3-highgpu-8g H100:8 on-demand $88.49/h (then aws/us-west-2)"
    )
    assert entry.checkpoint == "memory://secondary/step-000300" and entry.rpo == timedelta(minutes=10)


def test_rejection_aborts_before_provisioning():
    steps = ScriptedSteps({})
    entry, _ = run(steps, Gate(approve=False))
    assert entry.outcome == "aborted"
    assert "provision" not in [c[0] for c in steps.calls]
    assert "approval_granted" not in entry.phases


def test_failed_parity_rolls_back_to_the_previous_certified_checkpoint():
    steps = ScriptedSteps({}, parity=[False, True])
    entry, _ = run(steps, Gate())
    assert entry.outcome == "completed"
    assert entry.checkpoint == "memory://secondary/step-000200"
    assert "rolled back to step 200" in entry.notes["rollback"]
    assert len(steps.resumed) == 2
    assert entry.phases["first_step"] == steps.resumed[1].first_step_at, (
        "RTO counts to the resume that stayed"
    )


def test_parity_failing_twice_stops_and_pages_and_tears_down():
    steps = ScriptedSteps({}, parity=[False, False])
    gate = Gate()
    result, entry = run(steps, gate)
    assert result is None and entry.outcome == "failed"
    assert entry.failures[0].phase == "parity_passed"
    assert any("loss parity failed" in n for n in gate.notes)
    assert steps.clusters == set(), "a failed failover leaked its cluster"


def test_no_certified_checkpoint_stops_the_failover_before_approval():
    steps = ScriptedSteps({}, failing={"certify": StopFailover("no certified checkpoint")})
    gate = Gate()
    result, entry = run(steps, gate)
    assert result is None and gate.cards == []
    assert entry.failures[0].phase == "certified"


def test_drills_always_tear_down():
    steps = ScriptedSteps({})
    entry, _ = run(steps, Gate(), drill=True)
    assert entry.outcome == "completed" and entry.drill
    assert steps.clusters == set()


def test_provision_before_approval_starts_early_and_is_torn_down_on_rejection():
    rb = Runbook.model_validate(
        {**RUNBOOK, "approval": {"required": False, "provision_before_approval": True}}
    )
    steps = ScriptedSteps({"provision": 0.2})
    entry, _ = run(steps, Gate(approve=False), rb=rb)
    assert entry.outcome == "aborted"
    assert "provision" in [c[0] for c in steps.calls]
    assert steps.clusters == set()


def test_outage_start_comes_from_detection():
    start = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    entry, _ = run(ScriptedSteps({}, outage_started_at=start), Gate())
    assert entry.phases["outage_start"] == start


def test_critical_path_follows_the_graph_and_early_provisioning_shortens_it():
    from lifeboat.failover import critical_path, step_graph

    d = {"detect": 1, "confirm": 1, "fence": 1, "certify": 5, "plan": 1, "prestage": 3,
         "approval": 4, "provision": 6, "load": 2, "first_step": 1}  # fmt: skip
    assert critical_path(d) == 1 + 1 + 1 + 5 + 4 + 6 + 2 + 1
    assert critical_path(d, step_graph(provision_before_approval=True)) == 3 + max(5 + 4, 1 + 6) + 2 + 1


def test_a_step_past_the_runbook_timeout_stops_the_failover_and_tears_down():
    rb = Runbook.model_validate({**RUNBOOK, "failover": {"retries": 0, "step_timeout": "1s"}})
    steps = ScriptedSteps({"resume": 0, "load": 3})
    result, entry = run(steps, Gate(), rb=rb)
    assert result is None and entry.outcome == "failed"
    assert "ran past 1s" in entry.failures[0].error and entry.failures[0].phase == "checkpoint_loaded"
    assert steps.clusters == set()
