"""Fixtures of the fleet's fault tests."""

from __future__ import annotations

import pytest

from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_s3_bucket


@pytest.fixture
def proxied(s3_endpoint):
    """(proxy, store, direct): one fresh bucket's `control` prefix on moto, as an S3 store that
    reaches it through the loopback fault proxy (3 s deadline, 2 attempts) and as one that
    reaches it directly (to set up and to look)."""
    with ThrottlingProxy(s3_endpoint) as proxy:
        bucket = new_s3_bucket(s3_endpoint)
        store = S3Store(bucket, "control", endpoint_url=proxy.url, deadline_s=3)
        store.max_attempts = 2
        yield proxy, store, S3Store(bucket, "control", endpoint_url=s3_endpoint)
