"""S3 Cross-Region Replication through the real S3 adapter, on moto over HTTP. moto keeps a
replication rule but never replicates nor answers `x-amz-replication-status`
(tests/storage/test_moto_gap.py), so `moto_replicate` does what the rule would have (copy,
then the statuses moto's HEAD answers): what is tested is the adapter reading the header and
certification's use of it."""

import boto3

from lifeboat_dr.core.certify import NOT_REPLICATED, certify_replica
from lifeboat_dr.providers.storage.s3 import S3Store, replication_status
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.bucket_replication import moto_replicate, set_moto_status
from lifeboat_dr.testing.emulators import new_s3_bucket


def _s3(url):
    store = S3Store(new_s3_bucket(url), "run", endpoint_url=url)
    store.backoff_base = 0.01
    return store


def _keys(store, directory):
    return [i.key for i in store.list(f"{directory}/")]


def test_a_replica_the_bucket_finished_is_certified_by_its_head_alone(s3_endpoint):
    primary, secondary = _s3(s3_endpoint), _s3(s3_endpoint)
    d = write_checkpoint(primary, "manifest", 100)
    moto_replicate(primary, secondary, _keys(primary, d))

    report = certify_replica(secondary, primary, layout="manifest", replicated_by="s3-crr")

    assert report.certified.step == 100 and report.rejected == []
    assert report.calls["replica.head"] == 5  # one per object: its status and its CRC32C
    # the shards against the manifest's CRC32Cs; the manifest itself against the source's HEAD
    assert report.certified.verified_by == {"manifest": 4, "metadata": 1}
    assert primary.head(f"{d}/shard-000000.bin").replication == "COMPLETED"


def test_with_the_primary_down_an_object_copied_by_hand_rejects_its_checkpoint(s3_endpoint):
    primary, secondary = _s3(s3_endpoint), _s3(s3_endpoint)
    older, newer = write_checkpoint(primary, "manifest", 100), write_checkpoint(primary, "manifest", 200)
    moto_replicate(primary, secondary, _keys(primary, older))
    failed = f"{newer}/shard-000002.bin"
    moto_replicate(primary, secondary, _keys(primary, newer), fail=[failed])
    secondary.server_copy(primary, failed, failed)  # the missing shard, copied by hand

    report = certify_replica(
        secondary, primary, layout="manifest", source_down="region down", replicated_by="s3-crr"
    )

    assert report.certified.step == 100
    assert (report.rejected[0].step, report.rejected[0].reason) == (200, NOT_REPLICATED)
    assert "source.head" not in report.calls


def test_the_adapter_reads_each_status_s3_answers(s3_endpoint):
    store = _s3(s3_endpoint)
    store.put("a", b"x")
    assert store.head("a").replication is None  # no rule: S3 sends no header
    for status in ("PENDING", "COMPLETED", "FAILED", "REPLICA"):
        set_moto_status(store, "a", status)
        assert store.head("a").replication == status
    assert replication_status({"ReplicationStatus": "COMPLETE"}) == "COMPLETED"  # botocore's other spelling


def test_moto_keeps_a_replication_rule_but_replicates_nothing_and_sends_no_status(s3_endpoint):
    """The gap the fake fills: when this fails, moto replicates, and the tests should use it."""
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    source, destination = new_s3_bucket(s3_endpoint), new_s3_bucket(s3_endpoint)
    for bucket in (source, destination):
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_replication(
        Bucket=source,
        ReplicationConfiguration={
            "Role": "arn:aws:iam::123456789012:role/crr",
            "Rules": [
                {
                    "ID": "ckpt",
                    "Status": "Enabled",
                    "Priority": 1,
                    "Filter": {"Prefix": "run/"},
                    "DeleteMarkerReplication": {"Status": "Disabled"},
                    "Destination": {"Bucket": f"arn:aws:s3:::{destination}"},
                }
            ],
        },
    )
    s3.put_object(Bucket=source, Key="run/step-1/shard.bin", Body=b"weights")

    assert s3.get_bucket_replication(Bucket=source)["ReplicationConfiguration"]["Rules"][0]["ID"] == "ckpt"
    assert "ReplicationStatus" not in s3.head_object(Bucket=source, Key="run/step-1/shard.bin")  # S3: PENDING
    assert s3.list_objects_v2(Bucket=destination).get("KeyCount") == 0  # S3: the replica, within minutes
