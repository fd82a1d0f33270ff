"""The Store contract (tests/contracts/storage.py) on every backend Lifeboat ships."""

import pytest

from tests.contracts.storage import StoreContract


class TestLocalStore(StoreContract):
    BACKEND = "local"


class TestMemoryStore(StoreContract):
    """The fake: it must keep every promise the real stores keep, preconditions included."""

    BACKEND = "memory"


@pytest.mark.integration
class TestS3StoreOnMoto(StoreContract):
    BACKEND = "s3"


@pytest.mark.integration
class TestS3StoreOnSeaweedFS(StoreContract):
    """S3 on a server that checks what moto does not: the body's CRC32C (BadDigest)."""

    BACKEND = "seaweedfs"


@pytest.mark.integration
class TestGcsStoreOnFakeGcsServer(StoreContract):
    """GCS with its upload preconditions enforced (tests/storage/test_gcs_preconditions.py)."""

    BACKEND = "fake-gcs"


@pytest.mark.integration
class TestGcsStoreOnTheEmulator(StoreContract):
    """gcp-storage-emulator, which ignores preconditions: kept for the tests that ask none."""

    BACKEND = "gcs"
