"""Detection fixtures: a clock the test moves, the guarded runbook, recorded payloads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).parent
GUARDED = HERE / "runbooks" / "guarded.yaml"
PAYLOADS = HERE / "payloads"


class FakeClock:
    def __init__(self, start: datetime = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw) -> datetime:
        self.now += timedelta(**kw)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def guarded_path() -> Path:
    return GUARDED


@pytest.fixture
def payload():
    """Reads a recorded Alertmanager webhook body from tests/detect/payloads/."""
    return lambda name: json.loads((PAYLOADS / f"{name}.json").read_text())
