"""GCS-only behaviour on the in-process emulator."""

import pytest

from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.gcs import GcsStore


def test_missing_gcs_bucket_names_the_store(gcs_endpoint):
    store = GcsStore("no-such-bucket", "ckpt", endpoint_url=gcs_endpoint)
    with pytest.raises(NotFound, match=r"gs://no-such-bucket/ckpt: bucket 'no-such-bucket' does not exist"):
        list(store.list())
