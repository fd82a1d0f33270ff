"""Stores the fencing suite runs against: each backend is one fixture param.

LocalStore always; MemoryStore (the GCS-like fake) and S3Store on a moto server once the
storage backends are in the tree (skipped, saying so, until then). Every backend here
honours preconditions. The GCS emulator does not (it ignores `ifGenerationMatch`, see
DESIGN.md and test_gcs_emulator_limits.py), so racing against it would let two failovers
both "win": GCS fencing is tested on MemoryStore, which enforces generations as GCS does.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from providers.storage.local import LocalStore


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="session")
def moto_endpoint():
    if not _have("providers.storage.testing"):
        pytest.skip("providers.storage.testing (moto helpers) is not in this tree yet")
    from providers.storage.testing import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(params=["local", "memory", "s3-moto"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "secondary")
    if request.param == "memory":
        if not _have("providers.storage.memory"):
            pytest.skip("MemoryStore is not in this tree yet")
        from providers.storage.memory import MemoryStore

        return MemoryStore()
    if not _have("providers.storage.s3"):
        pytest.skip("S3Store is not in this tree yet")
    from providers.storage.s3 import S3Store
    from providers.storage.testing import new_s3_bucket

    endpoint = request.getfixturevalue("moto_endpoint")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    return S3Store(new_s3_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)
