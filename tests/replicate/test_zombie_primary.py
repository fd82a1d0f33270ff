"""A zombie primary: fenced while partitioned, it keeps training and committing on its store.

Its writes must never reach the active site (replication follows the site state and refuses
a copy from it) and never be certified there; retention must not let them push the active
lineage's checkpoints out. Runs on local stores and with the active site on S3 (moto).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from lifeboat_dr.core.certify import LINEAGE, certify_replica
from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.replication.direction import ReplicationSettings, direction, sources_to_replicate
from lifeboat_dr.core.retention import RetentionPolicy, retention_for
from lifeboat_dr.core.sitestate import RolesFlipped, read_site_state
from lifeboat_dr.kernel.errors import ProviderUnavailable, StopFailover
from lifeboat_dr.standins.checkpoints import replicate as raw_copy
from lifeboat_dr.standins.checkpoints import write_checkpoint


class Partitioned:
    """The primary's store as the failover sees it during the outage: nothing answers."""

    def __init__(self, inner):
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def __getattr__(self, name):
        def down(*a, **k):
            raise ProviderUnavailable(f"{self.uri}: connection timed out")

        return down


def _settings(keep_last: int = 2) -> ReplicationSettings:
    return ReplicationSettings("trainer", "manifest", timedelta(minutes=30), RetentionPolicy(keep_last))


def _commit(store, step: int, epoch: int) -> str:
    name = write_checkpoint(store, "manifest", step)
    commit_checkpoint(store, name, step, epoch)
    return name


def _replicate(settings, primary, secondary, **kw):
    way = direction(settings.runbook, primary, secondary, **kw)
    stores = {"primary": primary, "secondary": secondary}
    report = replicate_checkpoints(
        way.source,
        way.destination,
        sources_to_replicate(settings, way),
        rpo_target=settings.rpo_target,
        guard=way.guard(settings.runbook, stores),
    )
    return way, report


def _snapshot(store) -> list[tuple]:
    return sorted((o.key, o.size, o.crc32c) for o in store.list() if not o.key.startswith("_lifeboat/"))


@pytest.fixture(params=["local", "s3"])
def sites(request, make_store):
    return make_store("local"), make_store(request.param)


def test_a_zombie_primarys_checkpoints_never_reach_the_active_site_nor_certify(sites):
    primary, secondary = sites
    settings = _settings()
    _commit(primary, 10, epoch=0)
    way, _ = _replicate(settings, primary, secondary)
    assert way.source_role == "primary" and [c.step for c in certify_ok(secondary)] == [10]

    # The failover fences while the primary is partitioned; the job resumes on the secondary.
    lease, on_primary = fence_job(secondary, Partitioned(primary), run_id="failover-1", holder="lifeboat:dr")
    assert (lease.epoch, lease.active, on_primary) == (1, "secondary", None)
    _commit(secondary, 20, epoch=1)
    # The zombie never saw the fence: its own store still says epoch 0, so it commits.
    zombie_20 = _commit(primary, 20, epoch=0)
    zombie_30 = _commit(primary, 30, epoch=0)
    before = _snapshot(secondary)

    with pytest.raises(
        RolesFlipped, match=r"refusing to replicate trainer from the primary: secondary is active"
    ):
        _replicate(settings, primary, secondary, source="primary")
    assert _snapshot(secondary) == before
    # Reading the site state gave the primary's store the record it missed: the zombie
    # stops at its next commit.
    assert read_site_state({"primary": primary, "secondary": secondary}).stale == ()
    with pytest.raises(StopFailover, match="fenced out"):
        _commit(primary, 40, epoch=0)

    # The scheduled replication follows the site state: secondary -> primary.
    way, report = _replicate(settings, primary, secondary)
    assert way.source_role == "secondary" and way.caught_up == ()
    assert _snapshot(secondary) == before and not report.failed

    # Even copied behind Lifeboat's back, the zombie's step 30 is never certified...
    raw_copy(primary, secondary, zombie_30)
    report = certify_replica(secondary, None, layout="manifest")
    assert report.certified.step == 20
    assert [(r.step, r.reason) for r in report.rejected] == [(30, LINEAGE)]
    assert "fenced out" in report.rejected[0].detail and "secondary@1" in report.rejected[0].detail
    # ...and never counts for retention (keep_last 1 would otherwise drop the active step 20).
    one = _settings(keep_last=1)
    result = retention_for(secondary, primary, runbook=one.runbook, layout=one.layout, policy=one.retention)
    kept = {v.checkpoint.step: v.reason for v in result.verdicts if v.keep}
    assert set(kept) == {20, 30} and "not the active lineage" in kept[30]
    # On the primary, the active lineage's step 20 replaced the zombie's.
    assert b"".join(primary.read(f"{zombie_20}/lifeboat-commit.json")).count(b'"epoch": 1') == 1


def certify_ok(store):
    from lifeboat_dr.core.certify import certified_checkpoints

    return list(certified_checkpoints(store, None, layout="manifest"))


@pytest.mark.processes
def test_replicate_from_a_site_that_is_no_longer_active_is_refused_in_one_line(
    runbook_file, primary, secondary
):
    _commit(primary, 10, epoch=0)
    fence_job(secondary, Partitioned(primary), run_id="failover-1", holder="lifeboat:dr")
    before = _snapshot(secondary)
    run = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "replicate", str(runbook_file), "--from", "primary"],
        capture_output=True,
        text=True,
        cwd=runbook_file.parent,
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "refusing to replicate trainer from the primary" in lines[0], run.stderr
    assert _snapshot(secondary) == before
