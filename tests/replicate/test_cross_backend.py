"""Replication across providers over real protocol peers: moto S3 and the GCS emulator on
loopback, and local folders. CRC32C is the one checksum all three agree on."""

from __future__ import annotations

import pytest

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.transfer import RetryPolicy, TransferIncomplete, copy_prefix
from lifeboat_dr.kernel.errors import NotFound
from tests.runbook_yaml import two_site_runbook

pytestmark = pytest.mark.integration

CKPT = "run/step-000300"
PAIRS = [
    ("local", "s3"),
    ("s3", "gcs"),
    ("gcs", "s3"),
    ("gcs", "local"),
    ("s3", "local"),
    ("local", "gcs"),
    ("s3", "s3"),
    ("gcs", "gcs"),
]


def body(store, key: str) -> bytes:
    return b"".join(store.read(key))


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_a_checkpoint_replicates_across_providers_verified_and_once(
    src_kind, dst_kind, make_store, write_checkpoint
):
    src, dst = make_store(src_kind), make_store(dst_kind)
    write_checkpoint(src, CKPT, 300, shards=3, size=20_000)
    report = copy_prefix(src, dst, CKPT, CKPT)
    assert report.markers == [MANIFEST_NAME] and not report.hashed
    if src_kind == dst_kind:  # the data by CopyObject / rewrite: no bytes through us; the
        assert len(report.server_copied) == 3  # marker by a conditional PUT (a copy carries none)
        assert report.copied == [MANIFEST_NAME]
    for info in src.list(CKPT + "/"):
        landed = dst.head(info.key)
        assert landed.crc32c == src.head(info.key).crc32c is not None
        assert body(dst, info.key) == body(src, info.key)

    again = copy_prefix(src, dst, CKPT, CKPT)
    assert again.bytes_copied == 0 and len(again.skipped) == 4


THROTTLES = [("s3", 503), ("s3", 429), ("gcs", 503)]


@pytest.mark.parametrize(("kind", "status"), THROTTLES, ids=[f"{k}-{s}" for k, s in THROTTLES])
def test_throttling_is_retried_with_backoff_to_a_verified_replica(kind, status, make_store, write_checkpoint):
    from lifeboat_dr.testing.emulators import ThrottlingProxy

    src = make_store("local")
    write_checkpoint(src, CKPT, 300, shards=4, size=5_000)
    upstream = make_store(kind)  # the bucket, created directly on the emulator
    with ThrottlingProxy(upstream.endpoint_url, seed=3) as proxy:
        dst = type(upstream)(
            getattr(upstream, "bucket", None) or upstream.bucket_name, "ckpt", endpoint_url=proxy.url
        )
        dst.max_attempts = 1  # the store gives up at once: the copy engine's backoff must carry it
        proxy.status, proxy.fail = status, 6
        report = copy_prefix(src, dst, CKPT, CKPT, retry=RetryPolicy(attempts=10, base_delay=0.01))
        assert proxy.throttled == 6
    # S3: the engine's backoff carried it; GCS: google-cloud-storage retries 503/429 itself
    assert report.markers == [MANIFEST_NAME] and (report.retries >= 1 or kind == "gcs")
    for info in src.list(CKPT + "/"):
        assert upstream.head(info.key).crc32c == info.crc32c


def test_a_byte_flipped_between_s3_and_gcs_never_lands(make_store, write_checkpoint, faults):
    src, dst = make_store("s3"), make_store("gcs")
    write_checkpoint(src, CKPT, 300, shards=2, size=5_000)
    flaky = faults.Flipping(src, {f"{CKPT}/shard-001.bin"}, times=100)
    with pytest.raises(TransferIncomplete):
        copy_prefix(flaky, dst, CKPT, CKPT, retry=RetryPolicy(attempts=2, base_delay=0))
    with pytest.raises(NotFound):
        dst.head(f"{CKPT}/shard-001.bin")
    with pytest.raises(NotFound):
        dst.head(f"{CKPT}/{MANIFEST_NAME}")
    assert dst.head(f"{CKPT}/shard-000.bin").crc32c == src.head(f"{CKPT}/shard-000.bin").crc32c


def test_a_large_shard_streams_in_parts_and_a_corrupt_attempt_is_aborted_not_committed(
    make_store, faults, write_checkpoint
):
    # 20 MiB: above the single-PUT limit (16 MiB), so it streams as a multipart upload
    src, dst = make_store("local"), make_store("s3")
    write_checkpoint(src, CKPT, 300, shards=1, size=20 << 20)
    flaky = faults.Flipping(src, {f"{CKPT}/shard-000.bin"}, times=1)
    seen = []
    report = copy_prefix(flaky, dst, CKPT, CKPT, retry=RetryPolicy(base_delay=0, sleep=seen.append))
    assert report.retries == 1 and report.markers == [MANIFEST_NAME]
    assert dst.calls["AbortMultipartUpload"] == 1 and dst.calls["CompleteMultipartUpload"] == 1
    assert dst.head(f"{CKPT}/shard-000.bin").crc32c == src.head(f"{CKPT}/shard-000.bin").crc32c


def test_a_periodic_run_over_a_replicated_s3_checkpoint_heads_only_its_markers(make_store, write_checkpoint):
    src, dst = make_store("s3"), make_store("s3")
    write_checkpoint(src, CKPT, 300, shards=6, size=2_000)
    copy_prefix(src, dst, CKPT, CKPT)
    src.calls.clear()
    dst.calls.clear()
    report = copy_prefix(src, dst, CKPT, CKPT)
    assert len(report.skipped) == 7 and report.bytes_copied == 0
    assert src.calls["HeadObject"] == dst.calls["HeadObject"] == 1  # the manifest, not the shards


def test_lifeboat_replicate_copies_an_s3_primary_to_a_local_secondary(
    s3_endpoint, make_store, write_checkpoint, tmp_path, monkeypatch, capsys
):
    from lifeboat_dr.core.certify import newest_certified
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.shell.cli import main

    primary = make_store("s3")
    for step in (100, 200):
        write_checkpoint(primary, f"step-{step:06d}", step, shards=3, size=4_000)
    (tmp_path / "rb.yaml").write_text(
        two_site_runbook(
            "s3-to-local",
            primary={"infra": "aws/us-east-1", "store": primary.uri, "endpoint_url": s3_endpoint},
            secondary="file://replica",
            checkpoint={"layout": "manifest"},
        )
    )
    monkeypatch.chdir(tmp_path)
    assert main(["replicate", "rb.yaml"]) == 0
    assert "step-000200: copied 4 object(s)" in capsys.readouterr().out
    certified = newest_certified(LocalStore(tmp_path / "replica"), primary, layout="manifest")
    assert certified is not None and certified.step == 200


def test_replication_to_s3_leaves_a_receipt_so_an_outage_certifies_without_a_head_per_object(
    make_store, write_checkpoint
):
    from datetime import timedelta

    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME
    from lifeboat_dr.core.replication.copying import replicate_checkpoints

    src, dst = make_store("local"), make_store("s3")
    write_checkpoint(src, "step-000300", 300, shards=6, size=2_000)
    replicate_checkpoints(src, dst, committed_checkpoints(src), rpo_target=timedelta(hours=2))
    assert dst.head(f"step-000300/{RECEIPT_NAME}").size > 0

    report = certify_replica(dst, None, layout="manifest")  # the primary is down
    assert report.certified is not None and report.certified.step == 300
    assert report.mode == "manifest" and report.source is None and report.object_bytes_read == 0
    assert report.calls.get("replica.head", 0) == 0, report.calls
