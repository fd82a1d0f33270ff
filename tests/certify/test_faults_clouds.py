"""A truncated or empty manifest on an S3 or GCS replica rejects that step only, and a replica
that stops answering is named as the replica: on moto S3 and the GCS emulator."""

from __future__ import annotations

import pytest

from lifeboat_dr.core.certify import BAD_METADATA, StoreUnavailable, certify_replica
from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_gcs_bucket, new_s3_bucket

pytestmark = pytest.mark.integration


@pytest.fixture(params=["s3", "gcs"])
def stores(request):
    if request.param == "s3":
        url = request.getfixturevalue("s3_endpoint")
        make = lambda: S3Store(new_s3_bucket(url), "run", endpoint_url=url)  # noqa: E731
    else:
        url = request.getfixturevalue("gcs_endpoint")
        make = lambda: GcsStore(new_gcs_bucket(url), "run", endpoint_url=url)  # noqa: E731
    return make(), make()


@pytest.mark.parametrize("cut", [0, 40], ids=["empty", "truncated"])
def test_a_bad_manifest_on_a_cloud_replica_rejects_one_step(stores, cut):
    source, replica = stores
    for step in (100, 200):
        replicate(source, replica, write_checkpoint(source, "manifest", step))
    key = "step_0000200/lifeboat-manifest.json"
    replica.put(key, b"".join(replica.read(key))[:cut])
    report = certify_replica(replica, None, layout="manifest")  # the source is gone: manifests alone
    assert report.certified.step == 100
    (rejected,) = report.rejected
    assert rejected.reason == BAD_METADATA and "step_0000200" in rejected.detail


def test_an_s3_replica_that_stops_answering_is_named_as_the_replica(s3_endpoint):
    source = S3Store(new_s3_bucket(s3_endpoint), "run", endpoint_url=s3_endpoint)
    bucket = new_s3_bucket(s3_endpoint)
    replicate(
        source, S3Store(bucket, "run", endpoint_url=s3_endpoint), write_checkpoint(source, "manifest", 100)
    )
    with ThrottlingProxy(s3_endpoint) as proxy:
        replica = S3Store(bucket, "run", endpoint_url=proxy.url)
        replica.backoff_base, replica.max_attempts = 0.01, 2
        proxy.fail = 1000  # every request answered 503 SlowDown
        with pytest.raises(StoreUnavailable) as caught:
            certify_replica(replica, source, layout="manifest")
    assert caught.value.side == "replica" and str(caught.value).startswith(
        f"replica s3://{bucket}/run failed: "
    )
