"""Certification and retention after a copy read the standby as the copy left it: its one
listing, taken before the copy, plus what the copy wrote and deleted; no second listing.

Whatever happened in between (a first copy, a rerun over committed replicas, a changed
replica re-committed, a copy that failed half-way, one that failed before it could report,
a dry run), that view must equal a fresh listing of the standby, on every store kind, but
for an object whose copy failed: old, new or gone, it is unknown and left out (its
checkpoint then reads incomplete: kept, never counted). What it cannot see (written by
someone else after its listing) retention leaves for the next run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
from lifeboat_dr.core.checkpoints.layouts import Discovery, discover
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, build_manifest, commit_manifest
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.retention import retention_for
from lifeboat_dr.core.transfer import RetryPolicy
from lifeboat_dr.flows.wiring import replication_settings
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.runbooks.loader import load_runbook
from tests.runbook_yaml import two_site_runbook

STEPS = (100, 200, 300)
FAILS = "step-000300/shard-001.bin"  # the object `_rewrite` changes


def _seen(found: Discovery, store) -> dict:
    """Everything certification and retention read from a discovery (times to the second)."""

    def second(t):
        return None if t is None else t.replace(microsecond=0)

    return {
        "layout": found.layout,
        "pointers": found.pointers,
        "checkpoints": [
            (
                d.name,
                d.step,
                d.count,
                d.bytes,
                second(d.newest),
                sorted(d.markers),
                sorted(d.flags),
                [(i.key, i.size, i.crc32c, i.version, second(i.updated)) for i in d.files(store)],
            )
            for d in found.checkpoints
        ],
    }


def _replicate(primary, secondary, listed=None, **kwargs):
    """One pass as `lifeboat replicate` makes it: the standby listed once, before the copy."""
    return replicate_checkpoints(
        primary,
        secondary,
        committed_checkpoints(primary, "manifest"),
        rpo_target=timedelta(hours=1),
        retry=RetryPolicy(attempts=2, base_delay=0, sleep=lambda s: None),
        destination_found=discover(listed or secondary, "manifest"),
        **kwargs,
    )


def _retention(rb, secondary, primary, **kwargs):
    """The standby's retention as `lifeboat replicate` applies it."""
    settings = replication_settings(rb)
    return retention_for(
        secondary,
        primary,
        runbook=settings.runbook,
        layout=settings.layout,
        policy=settings.retention,
        **kwargs,
    )


def _rewrite(store, prefix: str, step: int) -> None:
    """A checkpoint's shard changed on the source, and its manifest re-committed."""
    store.put(f"{prefix}/shard-001.bin", b"changed" * 500)
    store.delete(f"{prefix}/{MANIFEST_NAME}")
    commit_manifest(store, prefix, build_manifest(store, prefix, step))


@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param("s3", marks=pytest.mark.integration),
        pytest.param("gcs", marks=pytest.mark.integration),
    ],
)
def test_the_standby_as_the_copy_left_it_equals_a_fresh_listing_after_every_kind_of_pass(
    backend, make_store, write_checkpoint, faults
):
    primary, secondary = make_store("local"), make_store(backend)
    for step in STEPS:
        write_checkpoint(primary, f"step-{step:06d}", step, shards=3, size=2_000)
    primary.put("latest", b"step-000300")
    secondary.put("notes/readme.txt", b"not a checkpoint")  # listed, never copied over

    class FailingPuts(faults.Proxy):
        def put(self, key, data, **kw):
            if key == FAILS:
                raise ProviderUnavailable(f"{key}: 503 SlowDown")
            return self.inner.put(key, data, **kw)

    class SourceUnlistable(faults.Proxy):
        def list(self, prefix=""):
            if prefix.startswith("step-000300"):
                raise ProviderUnavailable(f"{prefix}: 503 SlowDown")
            return self.inner.list(prefix)

    passes = {
        "first copy, with its pointer": lambda: _replicate(primary, secondary),
        "rerun over committed replicas": lambda: _replicate(primary, secondary),
        "dry run over a changed replica": lambda: (
            _rewrite(primary, "step-000300", 300),
            _replicate(primary, secondary, dry_run=True),
        )[1],
        "changed replica, half-done (unmarked, one shard failed)": lambda: _replicate(
            primary, FailingPuts(secondary), listed=secondary
        ),
        "failed before it could report": lambda: _replicate(SourceUnlistable(primary), secondary),
        "changed replica finished": lambda: _replicate(primary, secondary),
    }
    for name, run in passes.items():
        report = run()
        assert report.destination_found is not None, name
        unknown = {FAILS} if "half-done" in name else set()
        fresh = discover(secondary, "manifest", listing=(i for i in secondary.list() if i.key not in unknown))
        assert _seen(report.destination_found, secondary) == _seen(fresh, secondary), name
        if unknown:
            assert secondary.head(FAILS).size == 2_000  # the old one is still there; the view does not vouch
            assert list(report.failed) == ["step-000300"]
            newest = report.destination_found.checkpoints[0]
            assert newest.name == "step-000300" and MANIFEST_NAME not in newest.markers  # unmarked
            assert FAILS not in {i.key for i in newest.files(secondary)}


@pytest.fixture
def sites(make_store, write_checkpoint, tmp_path, monkeypatch):
    """(primary, secondary, runbook): local stores, the primary holding STEPS committed."""
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    primary, secondary = make_store("local"), make_store("local")
    for step in STEPS:
        write_checkpoint(primary, f"step-{step:06d}", step, shards=2, size=1_000)
    (tmp_path / "rb.yaml").write_text(
        two_site_runbook(
            "standby",
            primary=primary.uri,
            secondary=secondary.uri,
            checkpoint={"layout": "manifest", "retention": {"keep_last": 2}},
        )
    )
    return primary, secondary, load_runbook(tmp_path / "rb.yaml")


def test_retention_from_the_copys_view_keeps_what_someone_else_wrote_after_the_listing(
    sites, write_checkpoint, faults
):
    """Twice: a checkpoint another writer lands on the standby after this run listed it is
    not this run's to judge; the next run (a fresh listing) applies the policy to it."""
    primary, secondary, rb = sites

    class LateWriter(faults.Proxy):
        def list(self, prefix=""):
            yield from self.inner.list(prefix)
            if prefix == "":  # the run's listing is done: another writer lands an old step
                write_checkpoint(self.inner, "step-000050", 50, shards=2, size=1_000)

    report = _replicate(primary, secondary, listed=LateWriter(secondary))
    assert [d.name for d in report.destination_found.checkpoints] == [
        "step-000300",
        "step-000200",
        "step-000100",
    ]
    first = _retention(rb, secondary, primary, secondary_found=report.destination_found)
    assert first.deleted == ["step-000100"]
    assert sorted(d.name for d in discover(secondary, "manifest").checkpoints) == [
        "step-000050",
        "step-000200",
        "step-000300",
    ]

    second = _retention(rb, secondary, primary)  # the next run lists the standby afresh
    assert second.deleted == ["step-000050"]


def test_a_half_done_copy_of_the_newest_keeps_it_and_the_newest_certified_ones(
    sites, write_checkpoint, faults
):
    """Half-done: the newest step's copy fails part-way; the view shows it incomplete (kept,
    never counted), and the two newest certified steps stay. Only the oldest goes."""
    primary, secondary, rb = sites
    _replicate(primary, secondary)
    write_checkpoint(primary, "step-000400", 400, shards=4, size=1_000)

    class FailingPuts(faults.Proxy):
        def put(self, key, data, **kw):
            if key.startswith("step-000400/shard-00") and key.endswith(("1.bin", "3.bin")):
                raise ProviderUnavailable(f"{key}: connection reset")
            return self.inner.put(key, data, **kw)

    report = _replicate(primary, FailingPuts(secondary), listed=secondary)
    assert list(report.failed) == ["step-000400"]
    verdicts = {
        v.checkpoint.prefix: (v.keep, v.reason)
        for v in _retention(rb, secondary, primary, secondary_found=report.destination_found).verdicts
    }
    assert verdicts == {
        "step-000400": (True, "incomplete: left for replication or certify"),
        "step-000300": (True, "among the newest 2 certifiable"),
        "step-000200": (True, "among the newest 2 certifiable"),
        "step-000100": (False, "outside the retention policy"),
    }
