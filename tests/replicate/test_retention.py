"""Retention on the secondary: newest K, every Nth step, and what it must never delete."""

from __future__ import annotations

import pytest

from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.retention import apply_retention, plan_retention


def ckpts(*steps: int, incomplete: tuple[int, ...] = ()) -> list[StoredCheckpoint]:
    return [StoredCheckpoint(f"run/step-{s:06d}", s, complete=s not in incomplete) for s in steps]


def deleted(verdicts) -> list[int]:
    return sorted(v.checkpoint.step for v in verdicts if not v.keep)


def test_retention_keeps_the_newest_k_and_every_nth_step():
    verdicts = plan_retention(ckpts(*range(100, 1100, 100)), keep_last=3, keep_every=500)
    assert deleted(verdicts) == [100, 200, 300, 400, 600, 700]
    assert [v.checkpoint.step for v in verdicts][:3] == [1000, 900, 800]  # newest first


def test_retention_never_removes_the_newest_certified_checkpoint_even_when_newer_ones_exist():
    # steps 900 and 1000 replicated but do not certify (say a shard is corrupt): 800 is the
    # checkpoint a failover would resume from, outside "newest 2".
    verdicts = plan_retention(
        ckpts(600, 700, 800, 900, 1000),
        keep_last=2,
        protected={"run/step-000800": "newest certified checkpoint"},
    )
    assert deleted(verdicts) == [600, 700]
    reason = {v.checkpoint.step: v.reason for v in verdicts}
    assert reason[800] == "newest certified checkpoint"


def test_retention_keeps_a_checkpoint_a_running_failover_resumes_from():
    verdicts = plan_retention(ckpts(100, 200, 300, 400), keep_last=1, protected={"run/step-000100/"})
    assert deleted(verdicts) == [200, 300]


def test_an_incomplete_replica_is_left_alone_and_does_not_count_toward_k():
    verdicts = plan_retention(ckpts(100, 200, 300, incomplete=(300,)), keep_last=1)
    assert deleted(verdicts) == [100]


def test_retention_refuses_a_policy_that_keeps_nothing():
    with pytest.raises(ValueError, match="keep_last"):
        plan_retention(ckpts(100), keep_last=0)


def test_dry_run_lists_what_would_be_deleted_and_deletes_nothing(secondary, write_checkpoint):
    for step in (100, 200, 300):
        write_checkpoint(secondary, f"run/step-{step:06d}", step)
    before = [i.key for i in secondary.list()]
    report = apply_retention(secondary, plan_retention(ckpts(100, 200, 300), keep_last=2), dry_run=True)
    assert report.deleted == ["run/step-000100"] and report.objects == 5
    assert [i.key for i in secondary.list()] == before


def test_deletion_removes_the_manifest_before_any_shard(secondary, write_checkpoint, faults):
    for step in (100, 200):
        write_checkpoint(secondary, f"run/step-{step:06d}", step)
    watched = faults.Proxy(secondary)
    report = apply_retention(watched, plan_retention(ckpts(100, 200), keep_last=1))
    assert report.deleted == ["run/step-000100"]
    assert watched.calls[0] == ("delete", f"run/step-000100/{MANIFEST_NAME}")
    assert [i.key for i in secondary.list("run/step-000100/")] == []
    assert len(list(secondary.list("run/step-000200/"))) == 5
