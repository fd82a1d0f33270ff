"""Each drill's checks can fail: fed what a broken failover would leave, they say so."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fencing import fence
from lifeboat_dr.core.ledger import LedgerEntry
from lifeboat_dr.flows.drills.detection import gpu_fault_checks, gpu_fault_detection, losses_equal
from lifeboat_dr.flows.drills.policy import approval_timeout_checks, stale_writer_checks
from lifeboat_dr.flows.drills.sites import corrupted_replica_checks, plan_checks
from lifeboat_dr.providers.compute.base import PlanOption
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.runbooks.loader import load_runbook
from tests.drills.conftest import DEMO


def _failing(checks):
    return [c.name for c in checks if not c.ok]


def test_losses_equal_fails_on_one_different_loss():
    uninterrupted = {s: 1.0 / s for s in range(1, 51)}
    resumed = {s: 1.0 / s for s in range(21, 51)}
    assert losses_equal(uninterrupted, resumed, 20, through=27).ok

    resumed[33] = resumed[33] * (1 + 1e-12)
    check = losses_equal(uninterrupted, resumed, 20, through=27)
    assert not check.ok and "step 33" in check.detail


def test_losses_equal_fails_when_the_resumed_run_stops_short_of_the_kill():
    uninterrupted = {s: 1.0 / s for s in range(1, 51)}
    assert not losses_equal(uninterrupted, {21: 1 / 21, 22: 1 / 22}, 20, through=27).ok


@pytest.fixture
def heartbeat(tmp_path):
    path = tmp_path / "heartbeat.json"
    path.write_text('{"step": 43}')
    return path


def test_gpu_fault_checks_fail_for_an_xid_that_is_the_applications_fault(heartbeat):
    rb = _with_detection(signals=["gpu_health", "training_progress"], quorum=2)
    facts = gpu_fault_detection(rb, heartbeat, xid=13, stall_s=0.2)  # 13: graphics engine exception

    assert _failing(gpu_fault_checks(facts)) == [
        "XID 13 makes gpu_health fail",
        "XID + stalled heartbeat confirm",
    ]


def test_gpu_fault_checks_fail_when_one_signal_alone_confirms(heartbeat):
    rb = _with_detection(signals=["gpu_health", "training_progress"], quorum=1)
    facts = gpu_fault_detection(rb, heartbeat, xid=79, stall_s=0.2)

    assert _failing(gpu_fault_checks(facts)) == [
        "the XID alone does not confirm",
        "the stall alone does not confirm",
    ]


def _with_detection(**detection):
    rb = load_runbook(str(DEMO))
    doc = rb.model_dump(mode="json")
    doc["detection"].update(detection)
    return type(rb).model_validate(doc)


def _option(infra):
    return PlanOption(infra, None, None, False, 1.0)


def test_plan_checks_fail_when_the_failed_region_is_offered():
    offered = [_option("aws/us-east-1/us-east-1b"), _option("aws/us-west-2")]
    assert _failing(plan_checks(offered, "aws/us-west-2", "aws/us-east-1", "region")) == [
        "the plan never offers the failed region (aws/us-east-1)"
    ]


def test_plan_checks_fail_when_a_zone_outage_leaves_the_region():
    offered = [_option("aws/us-west-2")]
    assert _failing(plan_checks(offered, "aws/us-west-2", "aws/us-east-1/us-east-1a", "az")) == [
        "a zone outage fails over within the region"
    ]


def test_corrupted_replica_checks_fail_when_the_newest_is_certified_anyway():
    class Certified:  # a certification report whose newest step passed
        certified, rejected = type("C", (), {"step": 40}), ()

    class Entry:
        checkpoint = "file:///x/secondary/step-00000040"

    facts = {"newest": 40, "previous": 35, "flipped": [("/x/step-00000040/model.npy", 7, 160, 160)]}
    assert _failing(corrupted_replica_checks(facts, Certified, Entry)) == [
        "certification rejects it for its CRC",
        "certification falls back to the previous checkpoint",
        "the failover resumes from it",
    ]


def test_approval_timeout_checks_fail_when_a_human_answered():
    now = datetime.now(UTC)
    entry = LedgerEntry(
        runbook="demo",
        run_id="r1",
        drill=True,
        rto_target=timedelta(minutes=2),
        rpo_target=timedelta(seconds=30),
        phases={"approval_requested": now, "approval_granted": now},
        outcome="completed",
        notes={"approval": "approved by U0ONCALL via slack: go"},
    )
    assert _failing(approval_timeout_checks(entry, "abort")) == [
        "nobody answered: the policy decided at the deadline",
        "on_timeout=abort applies",
        "the abort is recorded and nothing was provisioned",
    ]


def test_stale_writer_checks_fail_when_the_job_was_never_fenced(tmp_path):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    failing = _failing(stale_writer_checks(primary, secondary, stale_epoch=0, new_epoch=None))

    assert failing == [
        "check_lease tells the stale primary to stop",
        "stale commit refused on the primary store",
        "stale commit refused on the secondary store",
        "the secondary's checkpoints are untouched",
    ]


def test_stale_writer_checks_pass_once_both_stores_are_fenced(tmp_path):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    secondary.put("step-00000040/model.npy", b"weights")
    lease = fence(secondary, run_id="r1", holder="lifeboat:demo-dr")
    fence(primary, run_id="r1", holder="lifeboat:demo-dr")

    assert _failing(stale_writer_checks(primary, secondary, stale_epoch=0, new_epoch=lease.epoch)) == []
