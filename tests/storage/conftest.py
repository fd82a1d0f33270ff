"""One store fixture over every backend: local dirs, moto S3, SeaweedFS S3, fake-gcs-server, the
GCS emulator, the memory fake.

The servers are real HTTP peers on 127.0.0.1, started once per session and stopped after;
each test gets a fresh bucket.
"""

import pytest

from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import new_gcs_bucket, new_s3_bucket
from lifeboat_dr.testing.memory_store import MemoryStore

BACKENDS = ["local", "s3", "seaweedfs", "gcs", "fake-gcs", "memory"]


@pytest.fixture
def make_store(request, tmp_path):
    """`make_store(backend)` -> a fresh, empty store on that backend."""
    count = iter(range(1000))

    def make(backend: str, prefix: str = "ckpt"):
        if backend == "local":
            return LocalStore(tmp_path / f"store{next(count)}" / prefix)
        if backend in ("s3", "seaweedfs"):
            url = request.getfixturevalue("s3_endpoint" if backend == "s3" else "seaweedfs_endpoint")
            return S3Store(new_s3_bucket(url), prefix, endpoint_url=url)
        if backend in ("gcs", "fake-gcs"):
            url = request.getfixturevalue("gcs_endpoint" if backend == "gcs" else "fake_gcs_endpoint")
            return GcsStore(new_gcs_bucket(url), prefix, endpoint_url=url)
        if backend == "memory":
            return MemoryStore()
        raise ValueError(backend)

    return make


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def store(backend, make_store):
    return make_store(backend)
