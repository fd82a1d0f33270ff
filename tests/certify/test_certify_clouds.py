"""Certification across real protocol peers: moto S3 and the GCS emulator on loopback."""

import pytest

from lifeboat_dr.core.certify import UNVERIFIABLE, certify_replica
from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_gcs_bucket, new_s3_bucket
from tests.s3_objects import put_composite_multipart


def _s3(url, prefix="run"):
    store = S3Store(new_s3_bucket(url), prefix, endpoint_url=url)
    store.backoff_base = 0.01
    return store


def test_s3_replica_of_a_gcs_source_is_certified_by_crc32c_metadata_alone(s3_endpoint, gcs_endpoint):
    source = GcsStore(new_gcs_bucket(gcs_endpoint), "run", endpoint_url=gcs_endpoint)
    replica = _s3(s3_endpoint)
    d = write_checkpoint(source, "dcp", 100)
    replicate(source, replica, d)  # across services: streamed, written with CRC32C
    report = certify_replica(replica, source, layout="dcp")
    assert report.certified.step == 100 and report.mode == "metadata"
    assert report.object_bytes_read == 0
    assert report.calls["replica.head"] == 5  # S3 list has no checksums: one HEAD per object
    assert report.certified.verified_by == {"metadata": 5}


def test_s3_to_s3_single_part_copies_verify_by_etag_without_heads(s3_endpoint):
    source, replica = _s3(s3_endpoint), _s3(s3_endpoint)
    replicate(source, replica, write_checkpoint(source, "hf", 100))
    report = certify_replica(replica, source, layout="hf")
    assert report.certified.verified_by == {"etag-md5": 6}  # 4 shards, index, trainer_state.json
    assert "replica.head" not in report.calls and report.object_bytes_read == 0


def test_composite_multipart_object_is_unverifiable_without_streaming(s3_endpoint, gcs_endpoint):
    source = GcsStore(new_gcs_bucket(gcs_endpoint), "run", endpoint_url=gcs_endpoint)
    replica = _s3(s3_endpoint)
    d = write_checkpoint(source, "dcp", 100)
    replicate(source, replica, d)
    key = f"{d}/__1_0.distcp"
    put_composite_multipart(
        replica.endpoint_url, replica.bucket, f"{replica.prefix}/{key}", b"".join(source.read(key))
    )
    refused = certify_replica(replica, source, layout="dcp", stream=False)
    assert refused.certified is None
    assert refused.rejected[0].reason == UNVERIFIABLE
    assert refused.rejected[0].detail.startswith(
        f"unverifiable {key}: the replica reports no comparable CRC32C"
    )
    streamed = certify_replica(replica, source, layout="dcp")
    assert streamed.certified.step == 100 and streamed.mode == "streaming"
    assert streamed.object_bytes_read == 256  # only the object metadata could not vouch for
    assert streamed.certified.verified_by == {"metadata": 4, "streamed": 1}


def test_s3_source_down_certifies_the_s3_replica_on_its_manifest(s3_endpoint):
    source, replica = _s3(s3_endpoint), _s3(s3_endpoint)
    replicate(source, replica, write_checkpoint(source, "manifest", 100))
    dead = S3Store(source.bucket, "run", endpoint_url="http://127.0.0.1:9")
    dead.backoff_base, dead.max_attempts = 0.01, 2
    report = certify_replica(replica, dead, layout="manifest")
    assert report.mode == "manifest-only-source-down"
    assert "after 2 attempt(s)" in report.source_error
    assert report.certified.step == 100 and report.certified.verified_by == {"manifest": 4}
    assert report.object_bytes_read == 0


def test_a_throttled_replica_is_retried_and_still_certified(s3_endpoint):
    source, replica = _s3(s3_endpoint), _s3(s3_endpoint)
    replicate(source, replica, write_checkpoint(source, "dcp", 100, manifest=True))
    with ThrottlingProxy(s3_endpoint) as proxy:
        throttled = S3Store(replica.bucket, "run", endpoint_url=proxy.url)
        throttled.backoff_base = 0.01
        proxy.fail = 3  # SlowDown on the first three requests
        report = certify_replica(throttled, source, layout="dcp")
    assert report.certified.step == 100
    assert throttled.calls["ListObjectsV2"] == 4  # 3 throttled + 1 answered


def test_missing_replica_bucket_is_a_clear_error_naming_the_store(s3_endpoint):
    missing = S3Store("no-such-replica", "run", endpoint_url=s3_endpoint)
    with pytest.raises(NotFound, match="s3://no-such-replica/run: bucket 'no-such-replica' does not exist"):
        certify_replica(missing, None, layout="dcp")


def test_a_replication_receipt_certifies_an_s3_replica_without_a_head_per_object(s3_endpoint):
    source, replica = _s3(s3_endpoint), _s3(s3_endpoint)
    replicate(source, replica, write_checkpoint(source, "manifest", 100), receipt=True)
    report = certify_replica(replica, None, layout="manifest")  # the source is gone
    assert report.certified.step == 100 and report.certified.verified_by == {"receipt": 4}
    assert "replica.head" not in report.calls and report.object_bytes_read == 0


def test_an_object_rewritten_after_its_receipt_is_headed_not_trusted(s3_endpoint):
    source, replica = _s3(s3_endpoint), _s3(s3_endpoint)
    d = write_checkpoint(source, "manifest", 100)
    replicate(source, replica, d, receipt=True)
    replica.put(f"{d}/shard-000002.bin", b"R" * 256)  # same size, new bytes, new ETag
    report = certify_replica(replica, None, layout="manifest")
    assert report.certified is None
    assert report.rejected[0].reason == "crc mismatch"
    assert report.rejected[0].detail.startswith(f"CRC32C mismatch {d}/shard-000002.bin: replica ")
    assert report.calls["replica.head"] == 1  # only the object whose ETag moved
