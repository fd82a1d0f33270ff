"""An emergency checkpoint certifies like any other, unless its commit record disowns its state."""

from lifeboat_dr.core.certify import INCONSISTENT, certify_replica
from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint


def _committed(source, replica, clock, step, record=None):
    clock.advance(minutes=10)
    d = write_checkpoint(source, "dcp", step, created=clock.now)
    commit_checkpoint(source, d, step, 0, record=record)
    replicate(source, replica, d)


def test_an_emergency_checkpoint_of_a_consistent_state_certifies(source, replica, clock):
    _committed(source, replica, clock, 100)
    _committed(source, replica, clock, 137, {"emergency": {"fault": "nccl", "step": 138, "consistent": True}})
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 137 and report.rejected == []


def test_a_checkpoint_whose_commit_record_says_inconsistent_is_never_certified(source, replica, clock):
    """Every shard intact, every checksum equal: the record still says the ranks held two steps."""
    _committed(source, replica, clock, 100)
    record = {"emergency": {"fault": "nccl", "step": 138, "consistent": False, "why": "ranks at 137 and 138"}}
    _committed(source, replica, clock, 137, record)
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 100
    (rejected,) = report.rejected
    assert (rejected.step, rejected.reason) == (137, INCONSISTENT)
    assert "its commit record says its state is not consistent (ranks at 137 and 138)" in rejected.detail


def test_a_partial_record_is_refused_too(source, replica, clock):
    _committed(source, replica, clock, 100)
    _committed(source, replica, clock, 120, {"partial": True, "why": "rank 1 never wrote"})
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 100
    assert [(r.step, r.reason) for r in report.rejected] == [(120, INCONSISTENT)]
