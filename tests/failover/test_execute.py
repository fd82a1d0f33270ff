"""The failover's own logic: the core walker over scripted steps, on threads, no Prefect.

`test_prefect_runner.py` runs the same walk as Prefect task runs on a real server."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.failover.walk import ThreadRunner, execute
from lifeboat_dr.flows.wiring import new_ledger, settings_for
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.testing.failover_steps import ScriptedSteps, scripted_runbook
from tests.failover.conftest import Gate


def run(steps, gate, rb=None, drill=False):
    rb = rb or scripted_runbook()
    ledger = new_ledger(rb, "run-1", drill=drill)
    try:
        return execute(settings_for(rb), steps, ledger, gate, run_id="run-1", drill=drill), ledger.entry
    except BaseException:
        return None, ledger.entry


def test_certify_plan_and_prestage_run_concurrently_and_fencing_waits_for_the_approval():
    steps = ScriptedSteps({"certify": 0.3, "plan": 0.3, "prestage": 0.3})
    entry, _ = run(steps, Gate())
    assert entry.outcome == "completed"
    spans = {name: (start, end) for name, start, end in steps.calls}
    assert all(spans[b][0] >= spans["confirm"][1] for b in ("certify", "plan", "prestage"))
    assert spans["fence"][0] >= max(spans[b][1] for b in ("certify", "plan", "prestage"))
    assert entry.phases["fenced"] >= entry.phases["approval_granted"]
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
        "approval_requested",
        "approval_granted",
        "fenced",
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


def test_a_rejected_failover_never_fences_nor_provisions():
    steps = ScriptedSteps({})
    entry, _ = run(steps, Gate(approve=False))
    assert entry.outcome == "aborted"
    called = [c[0] for c in steps.calls]
    assert "fence" not in called and "provision" not in called, "a rejection must leave the lease as it was"
    assert "approval_granted" not in entry.phases and "fenced" not in entry.phases


def test_every_acting_step_is_rechecked_first():
    steps = ScriptedSteps({})
    entry, _ = run(steps, Gate())
    assert entry.outcome == "completed"
    assert steps.rechecks == ["fence", "provision", "resume"]


@pytest.mark.parametrize("step", ["fence", "provision", "resume"])
def test_a_run_whose_job_was_taken_stands_down_and_leaves_the_shared_cluster_alone(step):
    steps = ScriptedSteps({}, taken_before=[step])
    gate = Gate()
    result, entry = run(steps, gate)
    assert result is not None and entry.outcome == "stood-down"
    assert "another failover took the job" in entry.notes["stood down"]
    called = [c[0] for c in steps.calls]
    assert step not in called
    if step == "resume":
        assert steps.clusters == {"scripted-dr"}, "the other run's cluster (same name) must stay"


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
    rb = scripted_runbook(approval={"required": False, "provision_before_approval": True})
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
    from lifeboat_dr.core.failover.graph import critical_path, step_graph

    d = {"detect": 1, "confirm": 1, "fence": 1, "certify": 5, "plan": 1, "prestage": 3,
         "approval": 4, "provision": 6, "resume": 3, "prove": 1}  # fmt: skip
    assert critical_path(d) == 1 + 1 + 1 + 5 + 4 + 6 + 3 + 1
    assert critical_path(d, step_graph(provision_before_approval=True)) == 3 + max(5 + 4, 1 + 6) + 3 + 1


def test_a_step_past_the_runbook_timeout_stops_the_failover_and_tears_down():
    rb = scripted_runbook(failover={"retries": 0, "step_timeout": "1s"})
    steps = ScriptedSteps({"resume": 0, "load": 3})
    result, entry = run(steps, Gate(), rb=rb)
    assert result is None and entry.outcome == "failed"
    assert "ran past 1s" in entry.failures[0].error and entry.failures[0].phase == "checkpoint_loaded"
    assert steps.clusters == set()


def test_a_failed_fence_calls_nothing_after_it():
    steps = ScriptedSteps({}, failing={"fence": StopFailover("lease held elsewhere")})
    result, entry = run(steps, Gate())
    assert result is None and entry.failures[0].phase == "fenced"
    assert not {"provision", "resume", "prove"} & {c[0] for c in steps.calls}


def test_with_provisioning_before_approval_the_fence_starts_at_the_decision_not_after_provisioning():
    rb = scripted_runbook(approval={"required": False, "provision_before_approval": True})
    steps = ScriptedSteps({"provision": 0.5})
    entry, _ = run(steps, Gate(), rb=rb)
    assert entry.outcome == "completed"
    spans = {name: (start, end) for name, start, end in steps.calls}
    assert spans["fence"][0] < spans["provision"][1], "the fence waited for provisioning"
    assert spans["load"][0] >= max(spans["fence"][1], spans["provision"][1])


def test_a_throttled_step_is_retried_and_a_permanent_error_is_not():
    from lifeboat_dr.kernel.errors import ProviderUnavailable

    calls = []

    def step(error):
        calls.append(error)
        if len(calls) == 1:
            raise error

    runner = ThreadRunner(retries=2, retry_delay_s=0)
    runner.result(runner.start("plan", step, ProviderUnavailable("429 Too Many Requests")))
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StopFailover):
        runner.result(runner.start("certify", step, StopFailover("no certified checkpoint")))
    assert len(calls) == 1


def test_a_stood_down_run_ends_in_a_state_a_worker_reads_without_a_traceback():
    """Under a worker, Prefect's engine asks the flow's final state for its result, raising for
    a Cancelled one: a Cancelled state carrying the result dict was 'TypeError: Unexpected
    result for failed state … dict cannot be resolved into an exception', 40 lines on the
    worker each time a duplicate alert's failover correctly stood down (issue #29)."""
    from lifeboat_dr.flows.failover import final_state

    steps = ScriptedSteps({}, taken_before=["fence"])
    _, entry = run(steps, Gate())
    state = final_state(entry, {"outcome": entry.outcome})

    assert state.is_completed() and state.name == "Stood down"
    assert state.result() == {"outcome": "stood-down"}  # what the worker's engine calls
    assert "another failover took the job" in state.message
