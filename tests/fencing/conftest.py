"""Stores the fencing suite runs against: each backend is one fixture param.

LocalStore, MemoryStore (the GCS-like fake) and S3Store on a moto server. Every backend
here honours preconditions. The GCS emulator does not (it ignores `ifGenerationMatch`, see
DESIGN.md and test_gcs_emulator_limits.py), so racing against it would let two failovers
both "win": GCS fencing is tested on MemoryStore, which enforces generations as GCS does.
"""

from __future__ import annotations

import pytest

from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.memory_store import MemoryStore


@pytest.fixture(params=["local", "memory", "s3-moto"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "secondary")
    if request.param == "memory":
        return MemoryStore()
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    endpoint = request.getfixturevalue("s3_endpoint")
    return S3Store(new_s3_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)
