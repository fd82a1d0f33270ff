"""Stores the fencing suite runs against: each backend is one fixture param.

LocalStore, MemoryStore, S3Store on a moto server and GcsStore on fake-gcs-server. Every
backend here honours the preconditions fencing asks: the lease and the commit markers are
conditional uploads, which fake-gcs-server refuses with 412 as GCS does
(tests/storage/test_gcs_preconditions.py). gcp-storage-emulator ignores them, so racing on it
would let two failovers both "win": it is not a backend here.
"""

from __future__ import annotations

import pytest

from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.memory_store import MemoryStore


@pytest.fixture(params=["local", "memory", "s3-moto", "fake-gcs"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "secondary")
    if request.param == "memory":
        return MemoryStore()
    if request.param == "fake-gcs":
        from lifeboat_dr.providers.storage.gcs import GcsStore
        from lifeboat_dr.testing.emulators import new_gcs_bucket

        endpoint = request.getfixturevalue("fake_gcs_endpoint")
        return GcsStore(new_gcs_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    endpoint = request.getfixturevalue("s3_endpoint")
    return S3Store(new_s3_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)
