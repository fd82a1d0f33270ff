"""The fork point sealed (found by the fault simulator, #28).

The failover certified step 10 while the primary was cut off (the secondary had no newer
replica) and resumed from it; the heal let its fence reach the primary, whose job had kept
committing meanwhile, so the exact count sealed there counted steps 20-30 too. The failback
then resumed from the old primary's step 30: a branch the failed-over job never continued,
its own steps discarded. The fence now seals the old epoch at the commit the run resumes
from, and every resume (a rollback's older checkpoint) seals there again.

Runs with the primary on a local folder and on S3 (moto).
"""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.core.certify import LINEAGE, certify_replica
from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import COMMIT_MARKER, fence_job, read_lease, seal_at_resume
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.standins.checkpoints import replicate as raw_copy
from lifeboat_dr.standins.checkpoints import write_checkpoint


def _commit(store, step: int, epoch: int) -> str:
    name = write_checkpoint(store, "manifest", step)
    commit_checkpoint(store, name, step, epoch)
    return name


def _commit_of(store, name: str) -> tuple[int, int, str]:
    doc = json.loads(b"".join(store.read(f"{name}/{COMMIT_MARKER}")))
    return doc["epoch"], doc["seq"], doc.get("counter", "")


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_the_old_primarys_commits_after_the_checkpoint_resumed_from_are_a_branch(make_store, backend):
    primary, secondary = make_store(backend), make_store("local")
    ten = _commit(primary, 10, 0)
    raw_copy(primary, secondary, ten)  # the only replica when the failover certified
    resumed_from = _commit_of(secondary, ten)
    later = [_commit(primary, step, 0) for step in (20, 30)]  # the cut-off primary keeps going

    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:dr", resumes=resumed_from)

    lease = read_site_state({"primary": primary, "secondary": secondary}).lease
    report = certify_replica(primary, secondary, layout="manifest", lease=lease)
    assert report.certified.step == 10, report.rejected
    assert {(r.step, r.reason) for r in report.rejected} == {(20, LINEAGE), (30, LINEAGE)}
    assert later


def test_a_rollback_seals_again_at_the_older_checkpoint(tmp_path):
    from lifeboat_dr.providers.storage.local import LocalStore

    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    names = [_commit(primary, step, 0) for step in (10, 20)]
    for name in names:
        raw_copy(primary, secondary, name)
    fence_job(secondary, primary, run_id="failover-1", holder="dr", resumes=_commit_of(secondary, names[1]))

    seal_at_resume([primary, secondary], "failover-1", _commit_of(secondary, names[0]), required=secondary)

    for store in (primary, secondary):
        seal = read_lease(store)[0].seal(0)
        assert (seal.basis, seal.commits) == ("resumed", _commit_of(secondary, names[0])[1])
    report = certify_replica(secondary, None, layout="manifest", lease=read_lease(secondary)[0])
    assert report.certified.step == 10 and [(r.step, r.reason) for r in report.rejected] == [(20, LINEAGE)]
