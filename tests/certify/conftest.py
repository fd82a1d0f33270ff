"""Source and replica stores for certification tests: memory fakes by default (fast,
injectable clock), moto S3 and the GCS emulator where a test is about those services."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.testing.memory_store import MemoryStore

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, **kw):
        self.now += timedelta(**kw)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def source(clock):
    return MemoryStore("primary", clock=clock)


@pytest.fixture
def replica(clock):
    return MemoryStore("secondary", clock=clock)
