"""Clocks that lie (#27, high): epochs are sealed by commit sequence, RPO by the stores' clocks.

A fence that cannot reach the old primary's store used to seal the old epoch at its own
wall-clock time, and a zombie's commit counted when the zombie's clock said it was earlier.
With the zombie's clock 10 min behind (or the control plane's 10 min ahead) the zombie's
later commits counted: retention on the standby deleted the active lineage's replicas and a
failback would have certified the zombie. Now the seal is the highest commit sequence of
that epoch the taking-over store holds, and no clock decides lineage.

A primary whose clock runs 10 min ahead gave a negative RPO ("target met"); the RPO now
comes from the store's own clock (the guarded commit's write time on the store).

Real processes with lying clocks (libfaketime), real trainers, moto for an S3 store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifeboat_dr.core.certify import LINEAGE, certify_replica
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.replication.direction import ReplicationSettings, direction, sources_to_replicate
from lifeboat_dr.core.retention import RetentionPolicy, retention_for
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.providers.storage.local import LocalStore
from tests.peers import needs

pytestmark = needs(None if shutil.which("faketime") else "no libfaketime here (apt-get install faketime)")

REPO = Path(__file__).resolve().parents[2]


def _run(cmd, *, lie: str | None = None, env: dict | None = None):
    """Run `cmd` (python args), its clock off by `lie` (libfaketime, e.g. "-10m")."""
    full = [sys.executable, *cmd]
    if lie:
        full = ["faketime", "-f", lie, *full]
    run = subprocess.run(
        full,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    return run


def _train(store_dir: Path, steps: int, *, epoch: int, resume: Path | None = None, lie: str | None = None):
    cmd = ["-m", "lifeboat_dr.standins.trainer", "--steps", str(steps), "--every", "10"]
    cmd += ["--ckpt-dir", str(store_dir), "--loss-log", str(store_dir) + f"-{epoch}-loss.jsonl"]
    if resume is not None:
        cmd += ["--resume", str(resume)]
    run = _run(cmd, lie=lie, env={"LIFEBOAT_EPOCH": str(epoch)})
    assert run.returncode == 0, run.stderr
    return run


FENCE = """
import sys
from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.local import LocalStore

class Partitioned:
    def __init__(self, inner):
        self.uri, self.capabilities = inner.uri, inner.capabilities
    def __getattr__(self, name):
        def down(*a, **k):
            raise ProviderUnavailable(self.uri + ": connection timed out")
        return down

fence_job(LocalStore(sys.argv[1]), Partitioned(LocalStore(sys.argv[2])), run_id="failover-1", holder="lifeboat:dr")
"""

SETTINGS = ReplicationSettings("trainer", "manifest", timedelta(minutes=30), RetentionPolicy(1))


def _replicate(primary, secondary):
    way = direction(SETTINGS.runbook, primary, secondary)
    report = replicate_checkpoints(
        way.source,
        way.destination,
        sources_to_replicate(SETTINGS, way),
        rpo_target=SETTINGS.rpo_target,
        guard=way.guard(SETTINGS.runbook, {"primary": primary, "secondary": secondary}),
    )
    assert not report.failed, report.failed
    return way


@pytest.mark.processes
@pytest.mark.parametrize(
    "zombie_lie, fence_lie",
    [
        pytest.param("-10m", None, id="zombie-clock-10min-behind"),
        pytest.param(None, "+10m", id="control-plane-clock-10min-ahead"),
    ],
)
def test_a_zombies_commits_never_count_whatever_the_clocks_say(tmp_path, zombie_lie, fence_lie):
    p_dir, s_dir = tmp_path / "primary", tmp_path / "secondary"
    primary, secondary = LocalStore(p_dir), LocalStore(s_dir)
    _train(p_dir, 10, epoch=0)
    assert _replicate(primary, secondary).source_role == "primary"

    # The failover fences the secondary while the primary is partitioned.
    fenced = _run(["-c", FENCE, str(s_dir), str(p_dir)], lie=fence_lie)
    assert fenced.returncode == 0, fenced.stderr
    _train(s_dir, 30, epoch=1, resume=s_dir / "step-00000010")  # the active lineage: 20, 30
    _train(p_dir, 50, epoch=0, resume=p_dir / "step-00000010", lie=zombie_lie)  # the zombie: 20..50

    # Replication follows the site state: the active lineage's 20 and 30 replace the zombie's.
    assert _replicate(primary, secondary).source_role == "secondary"

    # The failback's view of the primary: the zombie's 40 and 50 are not the active lineage.
    lease = read_site_state({"primary": primary, "secondary": secondary}).lease
    report = certify_replica(primary, secondary, layout="manifest", lease=lease)
    assert report.certified is not None and report.certified.step == 30, report.rejected
    assert [(r.step, r.reason) for r in report.rejected] == [(50, LINEAGE), (40, LINEAGE)]
    # Retention on the standby (the primary) keeps the active lineage's newest.
    result = retention_for(
        primary,
        secondary,
        runbook="trainer",
        layout="manifest",
        policy=SETTINGS.retention,
        sites={"primary": primary, "secondary": secondary},
    )
    kept = {v.checkpoint.step for v in result.verdicts if v.keep}
    assert {30, 40, 50} <= kept, [(v.checkpoint.step, v.keep, v.reason) for v in result.verdicts]


WRITE_ON_S3 = """
import sys
from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.standins.checkpoints import write_checkpoint

store = S3Store(sys.argv[1], "ckpt", endpoint_url=sys.argv[2])
commit_checkpoint(store, write_checkpoint(store, "manifest", 10), 10, 0)
"""


def test_a_primary_clock_10min_ahead_gives_the_true_rpo_never_a_negative_one(s3_endpoint, tmp_path):
    from lifeboat_dr.core.certify import rpo_row
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    bucket = new_s3_bucket(s3_endpoint)
    wrote = _run(["-c", WRITE_ON_S3, bucket, s3_endpoint], lie="+10m")  # the primary's job
    assert wrote.returncode == 0, wrote.stderr
    written = datetime.now(UTC)
    primary, secondary = S3Store(bucket, "ckpt", endpoint_url=s3_endpoint), LocalStore(tmp_path / "s")
    _replicate(primary, secondary)

    # The outage: the primary's store is gone; certification reads what the replica holds.
    outage = datetime.now(UTC)
    report = certify_replica(secondary, None, layout="manifest", at=outage)
    assert report.certified is not None
    assert timedelta(0) <= report.rpo <= outage - written + timedelta(seconds=2), report.rpo
    assert abs(report.certified.written_at - written) < timedelta(seconds=5)
    assert rpo_row(report, timedelta(minutes=30))["rpo_s"] >= 0


def test_a_failover_whose_control_plane_runs_10min_ahead_measures_the_skew_and_keeps_the_true_rpo(tmp_path):
    """The failover's own clock is 10 min fast: it reads the secondary store's clock (one
    small write), records the skew for the ledger with a warning, and the RPO it reports is
    the real one, not 10 min more."""
    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.core.failover.steps import Providers, ProviderSteps
    from lifeboat_dr.standins.checkpoints import write_checkpoint
    from tests.step_specs import bare_spec

    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    commit_checkpoint(primary, write_checkpoint(primary, "manifest", 10), 10, 0)
    _replicate(primary, secondary)
    fast = timedelta(minutes=10)
    outage = datetime.now(UTC) + fast  # as the control plane's clock read it
    spec = bare_spec()
    steps = ProviderSteps(
        spec,
        Providers(None, secondary, None, None, None),
        run_id="failover-1",
        cluster="trainer-dr",
        outage_started_at=outage,
        clock=lambda: datetime.now(UTC) + fast,
    )

    report = steps.certify()

    assert "behind the control plane" in report.clocks and "check NTP" in report.clocks, report.clocks
    assert timedelta(0) <= report.rpo < timedelta(seconds=30), report.rpo
    assert abs(outage - report.certified.written_at - report.rpo) < timedelta(seconds=1)
