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


class _SinglePutsThroughAwscrt:
    """LIFEBOAT_S3_ENGINE=awscrt: single PutObjects go through awscrt's client
    (providers/storage/s3_crt.py); every promise must hold as with botocore's."""

    @pytest.fixture(autouse=True)
    def _awscrt(self, monkeypatch):
        pytest.importorskip("awscrt")
        monkeypatch.setenv("LIFEBOAT_S3_ENGINE", "awscrt")

    def test_single_puts_go_through_awscrt_not_botocore(self, store):
        store.put("small", b"x" * 4096)
        store.put("created", b"y", if_none_match=True)
        assert store._crt is not None and store._clients == {}  # no botocore client was built
        assert store.calls["PutObject"] == 2


@pytest.mark.integration
class TestS3StoreOnSeaweedFSWithAwscrt(_SinglePutsThroughAwscrt, StoreContract):
    BACKEND = "seaweedfs"


@pytest.mark.integration
class TestS3StoreOnMotoWithAwscrt(_SinglePutsThroughAwscrt, StoreContract):
    BACKEND = "s3"
