"""Retention while a failover runs (#27, medium).

A failover records the checkpoint it resumes from in its ledger entry, written where the
flows write it: the local `.lifeboat/ledger.jsonl` and the chain `_lifeboat/chain/` in the
sites' stores. Retention must read it there (it read `_lifeboat/ledger/`), and a retention
pass planned before a fence must check the site state again before it deletes: after the
fence the store it trims is the active site's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.ledger_chain import LedgerChain
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.replication.direction import ReplicationSettings, direction, sources_to_replicate
from lifeboat_dr.core.retention import RetentionPolicy, retention_for
from lifeboat_dr.kernel.errors import LifeboatError, ProviderUnavailable
from lifeboat_dr.standins.checkpoints import write_checkpoint

SETTINGS = ReplicationSettings("trainer", "manifest", timedelta(minutes=30), RetentionPolicy(5))
KEEP_ONE = RetentionPolicy(1)


@pytest.fixture
def sites(make_store, monkeypatch, tmp_path):
    """Steps 10, 20, 30 committed on the primary and replicated; run from a folder with no
    local ledger (the replicate worker is not the failover's)."""
    monkeypatch.chdir(tmp_path)
    primary, secondary = make_store("local"), make_store("local")
    for step in (10, 20, 30):
        commit_checkpoint(primary, write_checkpoint(primary, "manifest", step), step, 0)
    way = direction(SETTINGS.runbook, primary, secondary)
    report = replicate_checkpoints(
        primary, secondary, sources_to_replicate(SETTINGS, way), rpo_target=SETTINGS.rpo_target
    )
    assert not report.failed
    return primary, secondary


def _failover_resumes_from(primary, secondary, checkpoint: str) -> None:
    """A failover run in progress, its ledger chained to both sites as the flows do it."""
    ledger = RtoLedger(
        "trainer",
        "failover-7",
        rto_target=timedelta(minutes=10),
        rpo_target=timedelta(minutes=30),
        sink=LedgerChain([secondary, primary]),
    )
    ledger.mark("outage_start")
    ledger.checkpoint(f"{secondary.uri.rstrip('/')}/{checkpoint}", datetime.now(UTC))


def _steps(store) -> list[int]:
    return sorted(int(o.key[5:12]) for o in store.list() if o.key.endswith("/lifeboat-manifest.json"))


def test_retention_keeps_the_checkpoint_a_running_failover_resumes_from_by_its_mirrored_ledger(sites):
    primary, secondary = sites
    _failover_resumes_from(primary, secondary, "step_0000010")

    result = retention_for(secondary, primary, runbook="trainer", layout="manifest", policy=KEEP_ONE)

    kept = {v.checkpoint.step: v.reason for v in result.verdicts if v.keep}
    assert "in use by failover run failover-7" in kept.get(10, ""), result.verdicts
    assert _steps(secondary) == [10, 30]


class FenceDuringRetention:
    """The primary as retention's certification reads it: the failover records its entry
    and fences right then, after retention started and before it deletes."""

    def __init__(self, inner, secondary):
        self.inner, self.secondary, self.done = inner, secondary, False
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, prefix: str = ""):
        if not self.done:
            self.done = True
            _failover_resumes_from(self.inner, self.secondary, "step_0000020")
            fence_job(self.secondary, self.inner, run_id="failover-7", holder="lifeboat:trainer-dr")
        return self.inner.list(prefix)


def test_retention_planned_before_a_fence_deletes_nothing_after_it(sites):
    primary, secondary = sites
    racing = FenceDuringRetention(primary, secondary)

    try:
        result = retention_for(secondary, racing, runbook="trainer", layout="manifest", policy=KEEP_ONE)
        deleted = result.deleted
    except LifeboatError as e:
        deleted, why = [], str(e)
        assert "secondary is active" in why or "site state changed" in why, why

    assert racing.done
    assert deleted == [] and _steps(secondary) == [10, 20, 30]


class FailsReading:
    """A store whose reads of one ledger-chain record fail (a reset mid-listing's reads)."""

    def __init__(self, inner, key_part: str):
        self.inner, self.key_part = inner, key_part
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read(self, key, start=0, end=None):
        if self.key_part in key:
            raise ProviderUnavailable(f"{self.uri}/{key}: connection reset (simulated)")
        return self.inner.read(key, start, end)


def test_retention_that_cannot_read_the_ledger_chain_whole_deletes_nothing(sites):
    """Found by the fault simulator: a read of the chain failing at one record on both sites
    ended the chain there, before the failover's entry: retention deleted its checkpoint."""
    primary, secondary = sites
    _failover_resumes_from(primary, secondary, "step_0000010")
    first = "_lifeboat/chain/trainer/000000000001.json"  # before the entry naming the checkpoint

    with pytest.raises(ProviderUnavailable, match="not read whole"):
        retention_for(
            FailsReading(secondary, first),
            FailsReading(primary, first),
            runbook="trainer",
            layout="manifest",
            policy=KEEP_ONE,
        )
    assert _steps(secondary) == [10, 20, 30]


def test_retention_of_a_pass_planned_before_a_fence_deletes_nothing_on_the_store_now_active(sites):
    """Found by the fault simulator: a replication pass chose its direction (secondary the
    standby), its copy was retried 30 s later, a fence landed meanwhile, and its retention
    trimmed the secondary, the active site's store by then."""
    primary, secondary = sites
    way = direction(SETTINGS.runbook, primary, secondary)
    fence_job(secondary, primary, run_id="failover-7", holder="lifeboat:trainer-dr")

    with pytest.raises(LifeboatError, match="site state changed since it was planned"):
        retention_for(
            way.destination,
            way.source,
            runbook="trainer",
            layout="manifest",
            policy=KEEP_ONE,
            sites=way.sites,
            planned=way.state,
        )
    assert _steps(secondary) == [10, 20, 30]


def test_retention_deletes_nothing_while_a_failover_holds_the_runbooks_lock(sites):
    """Found by the fault simulator: retention read the ledger (no failover there yet), a
    failover certified the very checkpoint retention then deleted: the ledger names it only
    once certified, the lock says a failover runs from its start."""
    from lifeboat_dr.core.lock import RunbookLock

    primary, secondary = sites
    with RunbookLock(secondary, "trainer", "failover-7"):
        result = retention_for(secondary, primary, runbook="trainer", layout="manifest", policy=KEEP_ONE)
    assert "retention waits: failover run failover-7" in result.paused and "holds the lock" in result.paused
    assert result.deleted == [] and _steps(secondary) == [10, 20, 30]
    result = retention_for(secondary, primary, runbook="trainer", layout="manifest", policy=KEEP_ONE)
    assert not result.paused and _steps(secondary) == [30]
