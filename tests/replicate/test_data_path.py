"""Replication's data path to S3 on a real moto server: one request per object, no HEAD after
a write or for the receipt, each byte read once and hashed once, one listing of the secondary
shared by certification and retention, and a half-done copy resumed."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, build_manifest, commit_manifest
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME, iter_receipt
from lifeboat_dr.core.transfer import RetryPolicy, TransferIncomplete, copy_prefix
from lifeboat_dr.kernel.errors import ProviderUnavailable
from tests.runbook_yaml import two_site_runbook

pytestmark = pytest.mark.integration

MiB = 1 << 20


@pytest.fixture
def hashed(monkeypatch):
    """Bytes run through CRC32C in this process, wherever the test's work calls it from: this
    thread and the threads started after (copy workers, moto's), not a thread an earlier
    test left running (a lock's renewer hashes the records it writes)."""
    import google_crc32c

    count = Counter()
    extend = google_crc32c.extend
    earlier = set(threading.enumerate()) - {threading.current_thread()}

    def counted(value, data):
        if threading.current_thread() not in earlier:
            count["bytes"] += len(data)
        return extend(value, data)

    monkeypatch.setattr(google_crc32c, "extend", counted)
    return count


def test_a_checkpoint_to_s3_is_one_put_per_object_no_head_and_every_byte_hashed_once(
    make_store, write_checkpoint, hashed
):
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints

    src, dst = make_store("local"), make_store("s3")
    write_checkpoint(src, "step-000300", 300, shards=3, size=5_000)
    src.put("step-000300/shard-big.bin", b"\x05" * (20 * MiB))  # above the single-PUT limit
    src.delete(f"step-000300/{MANIFEST_NAME}")
    commit_manifest(src, "step-000300", build_manifest(src, "step-000300", 300))
    total = sum(i.size for i in src.list("step-000300/"))
    hashed.clear()

    report = replicate_checkpoints(src, dst, committed_checkpoints(src), rpo_target=timedelta(hours=1))
    assert not report.failed
    calls = dict(dst.calls)
    assert "HeadObject" not in calls, calls
    assert calls["PutObject"] == 3 + 1 + 1  # three small shards, the manifest, the receipt
    assert calls["CreateMultipartUpload"] == calls["CompleteMultipartUpload"] == 1
    receipt = b"".join(dst.read(f"step-000300/{RECEIPT_NAME}"))
    assert hashed["bytes"] == total + len(receipt)  # each byte once, the receipt's too

    entries = list(iter_receipt([receipt]))  # written from the writes' answers: what HEAD says
    assert len(entries) == 5
    for e in entries:
        head = dst.head(f"step-000300/{e.path}")
        assert (e.size, e.etag, e.crc32c) == (head.size, head.etag, head.crc32c)


def test_a_half_done_copy_resumes_with_only_what_is_missing(make_store, write_checkpoint, faults):
    src, dst = make_store("local"), make_store("s3")
    write_checkpoint(src, "run/step-100", 100, shards=6, size=3_000)

    class Failing(faults.Proxy):
        def put(self, key, data, **kw):
            if key.endswith(("shard-002.bin", "shard-004.bin")):
                raise ProviderUnavailable(f"{key}: 503 SlowDown")
            return super().put(key, data, **kw)

    failing = Failing(dst)
    with pytest.raises(TransferIncomplete):
        copy_prefix(src, failing, "run/step-100", "run/step-100", retry=RetryPolicy(attempts=2, base_delay=0))
    assert sorted(i.key for i in dst.list()) == [f"run/step-100/shard-00{i}.bin" for i in (0, 1, 3, 5)]

    dst.calls.clear()
    rerun = copy_prefix(src, dst, "run/step-100", "run/step-100")
    assert rerun.copied == [MANIFEST_NAME, "shard-002.bin", "shard-004.bin"]
    assert sorted(rerun.skipped) == ["shard-000.bin", "shard-001.bin", "shard-003.bin", "shard-005.bin"]
    assert dst.calls["PutObject"] == 3
    assert set(rerun.landed) == {MANIFEST_NAME, *(f"shard-00{i}.bin" for i in range(6))}  # receipt-ready


def test_lifeboat_replicate_lists_the_secondary_once_for_the_copy_certification_and_retention(
    s3_endpoint, make_store, write_checkpoint, tmp_path, monkeypatch, capsys
):
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.shell.cli import main

    calls: Counter = Counter()
    call = S3Store._call

    def counted(self, op, key=None, **kwargs):
        # the site state (`_lifeboat/lease.json`) is read and written by its own protocol; the
        # data path is every other request
        if not str(key or "").startswith("_lifeboat/") and "_lifeboat/" not in str(kwargs.get("prefix", "")):
            calls[op] += 1
        return call(self, op, key, **kwargs)

    monkeypatch.setattr(S3Store, "_call", counted)
    primary, secondary = make_store("local"), make_store("s3")
    for step in (100, 200, 300):
        write_checkpoint(primary, f"step-{step:06d}", step, shards=3, size=2_000)
    (tmp_path / "rb.yaml").write_text(
        two_site_runbook(
            "local-to-s3",
            primary=primary.uri,
            secondary={"store": secondary.uri, "endpoint_url": s3_endpoint},
            checkpoint={"layout": "manifest", "retention": {"keep_last": 2}},
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    calls.clear()
    assert main(["replicate", "rb.yaml"]) == 0
    out = capsys.readouterr().out
    assert "keep step-000300 (step 300): among the newest 2 certifiable" in out
    assert "HeadObject" not in calls, calls
    # the secondary listed once, before the copy: each copy starts from it, and certification
    # and retention read it as the copies left it; one listing of each ledger prefix (the
    # objects' `_lifeboat/ledger/`, the chain's `_lifeboat/chain/`); none for the receipts
    assert calls["ListObjectsV2"] == 1 + 2, calls
    assert calls["PutObject"] == 2 * (3 + 1 + 1)


def test_lifeboat_replicate_reads_the_site_state_in_one_request_per_store_per_check(
    s3_endpoint, make_store, write_checkpoint, tmp_path, monkeypatch, capsys
):
    """The #13 check stays (before the copy, before each checkpoint's first write and before
    its markers (#27), before retention), each a single GET of the lease per store: no HEAD,
    not re-read by every helper."""
    from lifeboat_dr.core.fencing import LEASE_KEY, fence_job
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.shell.cli import main

    lease_calls: Counter = Counter()
    call = S3Store._call

    def counted(self, op, key=None, **kwargs):
        if key == LEASE_KEY:
            lease_calls[op] += 1
        return call(self, op, key, **kwargs)

    monkeypatch.setattr(S3Store, "_call", counted)
    # the S3 store is the runbook's primary site, the local one its secondary (DR) site
    remote, local = make_store("s3"), make_store("local")
    for step in (100, 200):
        write_checkpoint(local, f"step-{step:06d}", step, shards=2, size=1_000)
    (tmp_path / "rb.yaml").write_text(
        two_site_runbook(
            "local-to-s3",
            primary={"store": remote.uri, "endpoint_url": s3_endpoint},
            secondary=local.uri,
            checkpoint={"layout": "manifest", "retention": {"keep_last": 2}},
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    # never fenced (the lease is a 404): the secondary is refused as a source after one GET
    lease_calls.clear()
    assert main(["replicate", "rb.yaml", "--from", "secondary"]) == 1
    assert dict(lease_calls) == {"GetObject": 1}, lease_calls

    # failed over: the local site is active, the S3 one the standby; the copy goes local -> S3
    fence_job(local, remote, run_id="failover-1", holder="lifeboat:dr", runbook="local-to-s3")
    lease_calls.clear()
    assert main(["replicate", "rb.yaml"]) == 0, capsys.readouterr()
    # direction; each checkpoint's check before its data and before its markers (the first
    # too: a copy retried after a fence must not trust direction's read, #28); retention
    assert dict(lease_calls) == {"GetObject": 6}, lease_calls
