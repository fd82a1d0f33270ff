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
class TestGcsStoreOnTheEmulator(StoreContract):
    BACKEND = "gcs"
