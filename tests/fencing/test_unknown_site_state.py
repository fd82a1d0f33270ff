"""A store that does not answer is *unknown*, never "no lease" (#27, critical).

After a failover that fenced the secondary alone (the primary was partitioned), the active
lineage lives on the secondary's store. When that store then fails its lease GET (503
SlowDown, or resets), the primary's store alone says "primary is active (epoch 0)": acting
on it copies the zombie's checkpoints over the active lineage's, lets retention delete, and
certifies the zombie. Every reader must stop instead: nothing written or deleted, one line
naming the store, exit 75 (retry), and the next run, with the store back, does it right.

Real peers: the secondary is S3 on moto behind the loopback fault proxy; the primary a
local folder; `lifeboat replicate` and `lifeboat certify` run as real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_s3_bucket

RETRY_EXIT = 75


class Partitioned:
    """The primary's store as the failover saw it: nothing answers."""

    def __init__(self, inner):
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def __getattr__(self, name):
        def down(*a, **k):
            raise ProviderUnavailable(f"{self.uri}: connection timed out")

        return down


def _commit(store, step: int, epoch: int) -> str:
    name = write_checkpoint(store, "manifest", step)
    commit_checkpoint(store, name, step, epoch)
    return name


def _snapshot(store) -> list[tuple]:
    return sorted((o.key, o.size, o.version) for o in store.list() if not o.key.startswith("_lifeboat/"))


def _markers(store) -> dict[str, bytes]:
    return {
        o.key: b"".join(store.read(o.key)) for o in store.list() if o.key.endswith("lifeboat-commit.json")
    }


RUNBOOK = """\
name: trainer
workload: finetuning
targets: {{rpo: 30m}}
primary: {{infra: local, store: "file://{primary}"}}
secondary: {{infra: local, store: "s3://{bucket}/ckpt", endpoint_url: "{endpoint}", candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m, retention: {{keep_last: 2}}}}
"""


@pytest.fixture
def incident(s3_endpoint, tmp_path):
    """The state after the failover: the secondary active at epoch 1 with its own steps 20
    and 30, the zombie primary's own steps 20 and 30 at epoch 0, step 10 on both."""
    with ThrottlingProxy(s3_endpoint) as proxy:
        bucket = new_s3_bucket(s3_endpoint)
        primary = LocalStore(tmp_path / "primary")
        secondary = S3Store(bucket, "ckpt", endpoint_url=proxy.url, deadline_s=3)
        runbook = tmp_path / "trainer.yaml"
        runbook.write_text(RUNBOOK.format(primary=tmp_path / "primary", bucket=bucket, endpoint=proxy.url))
        ten = _commit(primary, 10, epoch=0)
        for o in primary.list(f"{ten}/"):
            secondary.put(o.key, b"".join(primary.read(o.key)))
        fence_job(secondary, Partitioned(primary), run_id="failover-1", holder="lifeboat:trainer-dr")
        _commit(secondary, 20, epoch=1)
        _commit(secondary, 30, epoch=1)
        _commit(primary, 20, epoch=0)  # the zombie never saw the fence
        _commit(primary, 30, epoch=0)
        yield proxy, primary, secondary, runbook


def _lifeboat(runbook, *args):
    env = {**os.environ, "LIFEBOAT_STORE_DEADLINE": "3"}
    return subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", *args, str(runbook)],
        capture_output=True,
        text=True,
        cwd=runbook.parent,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("fault", ["503", "reset"])
def test_replicate_with_the_active_store_silent_changes_nothing_and_asks_for_a_retry(incident, fault):
    proxy, primary, secondary, runbook = incident
    before = (_snapshot(primary), _snapshot(secondary), _markers(secondary))
    proxy.inject(fault, "_lifeboat/lease.json", times=None)  # every lease GET, for longer than retries

    run = _lifeboat(runbook, "replicate")

    assert run.returncode == RETRY_EXIT, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert secondary.uri in lines[0] and "did not answer" in lines[0], lines[0]
    proxy.clear()
    assert (_snapshot(primary), _snapshot(secondary), _markers(secondary)) == before

    # The next run, with the store answering, follows the site state: secondary -> primary.
    again = _lifeboat(runbook, "replicate")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "secondary is active (epoch 1" in again.stdout
    assert _markers(secondary) == before[2]  # the active lineage's steps 20 and 30 untouched
    for key, body in _markers(secondary).items():
        if not key.startswith("step_0000010/"):  # the primary is the standby now: kept 2 there
            assert b"".join(primary.read(key)) == body  # the active lineage's, over the zombie's


def test_certify_with_the_active_store_silent_certifies_nothing_and_asks_for_a_retry(incident):
    proxy, primary, secondary, runbook = incident
    proxy.inject("503", "_lifeboat/lease.json", times=None)

    run = _lifeboat(runbook, "certify")

    assert run.returncode == RETRY_EXIT, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and secondary.uri in lines[0] and "did not answer" in lines[0], run.stderr


def test_retention_and_certification_in_core_refuse_a_view_without_the_active_store(incident):
    from datetime import timedelta

    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.core.replication.direction import ReplicationSettings, direction
    from lifeboat_dr.core.retention import RetentionPolicy, retention_for

    proxy, primary, secondary, _ = incident
    before = _snapshot(secondary)
    settings = ReplicationSettings("trainer", "manifest", timedelta(minutes=30), RetentionPolicy(1))
    proxy.inject("reset", "_lifeboat/lease.json", times=None)
    with pytest.raises(ProviderUnavailable, match="did not answer"):
        direction(settings.runbook, primary, secondary)
    with pytest.raises(ProviderUnavailable, match="did not answer"):
        retention_for(secondary, primary, runbook="trainer", layout="manifest", policy=RetentionPolicy(1))
    with pytest.raises(ProviderUnavailable, match="did not answer"):
        certify_replica(secondary, primary, layout="manifest")
    proxy.clear()
    assert _snapshot(secondary) == before


def test_a_view_from_the_primarys_store_alone_is_never_conclusive(tmp_path):
    """The primary's store may have missed a failover's fence: alone it proves nothing."""
    from lifeboat_dr.core.sitestate import read_site_state

    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    with pytest.raises(ProviderUnavailable, match=r"did not answer|cannot be opened"):
        read_site_state({"primary": primary, "secondary": None})
    with pytest.raises(ProviderUnavailable, match="did not answer"):
        read_site_state({"primary": primary, "secondary": Partitioned(secondary)})
    # The secondary's store alone is: every fence writes it.
    fence_job(secondary, Partitioned(primary), run_id="failover-1", holder="dr")
    assert read_site_state({"primary": Partitioned(primary), "secondary": secondary}).lineage == "secondary@1"


def test_a_failback_that_cannot_write_the_secondarys_store_fences_nothing(tmp_path):
    """Were a failback to fence the primary's store alone, the secondary's store (which a
    reader trusts alone) would keep saying "secondary is active": refused, nothing written."""
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    fence_job(secondary, primary, run_id="failover-1", holder="dr")
    before = b"".join(primary.read("_lifeboat/lease.json"))
    with pytest.raises(ProviderUnavailable, match=f"{secondary.uri}.*did not answer"):
        fence_job(
            primary,
            Partitioned(secondary),
            run_id="failback-1",
            holder="home",
            active="primary",
            expect_epoch=1,
        )
    assert b"".join(primary.read("_lifeboat/lease.json")) == before
