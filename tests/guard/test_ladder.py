"""Which rungs of the recovery ladder a fault starts on, and the escalation (pure)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifeboat_dr.core.guard.ladder import RUNGS, SCOPES, FaultSeen, fault_from_event, next_rung, rungs_for

ALL = list(RUNGS)


@pytest.mark.parametrize("kind", ["nccl", "timeout", "hang"])
def test_a_hang_nccl_or_timeout_fault_starts_at_the_in_job_restart(kind):
    assert rungs_for(ALL, FaultSeen(kind)) == ALL


def test_a_cuda_error_that_poisoned_the_device_skips_the_restart_on_that_node():
    fault = fault_from_event(
        {"kind": "cuda", "detail": "AcceleratorError: CUDA error: an illegal memory access"}
    )
    assert fault.poisoned
    assert rungs_for(ALL, fault) == ["relaunch-without-node", "other-zone", "failover"]


def test_a_cuda_out_of_memory_leaves_the_device_usable_and_starts_at_restart():
    fault = fault_from_event({"kind": "cuda", "detail": "OutOfMemoryError: CUDA out of memory."})
    assert not fault.poisoned and rungs_for(ALL, fault)[0] == "restart"


def test_a_critical_xid_from_the_watch_poisons_the_device_and_an_application_xid_does_not():
    fell = fault_from_event({"kind": "xid", "xid": 79, "critical": True, "host": "gpu-017"})
    assert fell.poisoned and rungs_for(ALL, fell)[0] == "relaunch-without-node"
    app = fault_from_event({"kind": "xid", "xid": 13, "critical": False})
    assert not app.poisoned and rungs_for(ALL, app)[0] == "restart"
    assert not fault_from_event({"kind": "xid", "critical": "true"}).poisoned  # only a JSON true


def test_a_zone_outage_skips_the_restart_and_the_relaunch_in_that_zone():
    assert rungs_for(ALL, FaultSeen("nccl", scope="zone")) == ["other-zone", "failover"]


@pytest.mark.parametrize("scope", ["region", "provider"])
def test_a_region_or_provider_outage_goes_straight_to_failover(scope):
    assert rungs_for(ALL, FaultSeen("hang", scope=scope)) == ["failover"]


def test_a_ladder_that_cannot_help_a_zone_outage_says_so_by_an_empty_plan():
    assert rungs_for(["restart", "relaunch-without-node"], FaultSeen("nccl", scope="zone")) == []


def test_the_event_payload_names_host_rank_and_step_and_a_forged_payload_reads_as_unknown():
    fault = fault_from_event({"kind": "hang", "host": "node-7", "rank": 3, "step": 41})
    assert (fault.host, fault.rank, fault.step, fault.poisoned) == ("node-7", 3, 41, False)
    forged = fault_from_event({"kind": ["cuda"], "rank": "0; rm -rf", "step": None})
    assert (
        forged.kind is None and forged.rank is None and rungs_for(ALL, forged)[0] == "relaunch-without-node"
    )


def test_an_unknown_scope_or_rung_is_refused():
    with pytest.raises(ValueError, match="scope"):
        FaultSeen("nccl", scope="planet")
    with pytest.raises(ValueError, match="reboot"):
        rungs_for(["reboot", "failover"], FaultSeen("nccl"))


def test_escalation_goes_up_one_rung_per_failure_and_stops_at_the_first_that_recovers():
    plan = ALL
    assert next_rung(plan, {}) == "restart"
    assert next_rung(plan, {"restart": "failed"}) == "relaunch-without-node"
    assert next_rung(plan, {"restart": "failed", "relaunch-without-node": "completed"}) is None
    assert next_rung(plan, {"restart": "rejected"}) is None  # no larger action after a person's no
    assert next_rung(plan, {r: "failed" for r in plan}) is None


def test_a_rung_left_in_progress_by_a_dead_walk_is_the_one_tried_again():
    assert (
        next_rung(ALL, {"restart": "failed", "relaunch-without-node": "in-progress"})
        == "relaunch-without-node"
    )


policies = st.lists(st.sampled_from(RUNGS), unique=True).map(
    lambda rs: [r for r in rs if r != "failover"] + (["failover"] if "failover" in rs else [])
)
faults = st.builds(
    FaultSeen,
    kind=st.sampled_from(["nccl", "cuda", "timeout", "hang", None]),
    scope=st.sampled_from(SCOPES),
    poisoned=st.booleans(),
)


def _walk(plan, fails):
    """Every rung tried in escalation order, each failing where `fails` says."""
    outcomes, tried = {}, []
    while (rung := next_rung(plan, outcomes)) is not None:
        tried.append(rung)
        outcomes[rung] = "failed" if fails(rung) else "completed"
    return tried


@given(policies, faults, st.sets(st.sampled_from(RUNGS)))
def test_no_rung_is_tried_twice_and_the_walk_stops_at_the_first_that_recovers(policy, fault, failing):
    plan = rungs_for(policy, fault)
    tried = _walk(plan, lambda r: r in failing)
    assert len(tried) == len(set(tried))
    assert tried == plan[: len(tried)]  # in the policy's order, none skipped on the way
    assert all(r in failing for r in tried[:-1])


@given(policies, faults)
def test_failover_is_never_skipped_when_in_the_policy_and_every_earlier_rung_failed(policy, fault):
    tried = _walk(rungs_for(policy, fault), lambda r: True)
    assert ("failover" in tried) == ("failover" in policy)
