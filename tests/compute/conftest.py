"""Compute fixtures; the contract suite's own (option, make_job) live in tests/contracts/compute.py."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from lifeboat_dr.providers.compute.base import PlanOption

PY = sys.executable

# SkyPilot fixes its catalog paths when first imported: give this test process its own
# runtime dir (the shipped offline catalog is copied there), never the user's ~/.sky.
os.environ.setdefault("LIFEBOAT_SKY_RUNTIME_DIR", tempfile.mkdtemp(prefix="lifeboat-sky-"))


@pytest.fixture
def local_option():
    return PlanOption(infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0)


@pytest.fixture
def launcher(tmp_path):
    """SkyPilot's fake launcher (testing/skypilot_sdk.py); its clusters go down after."""
    from lifeboat_dr.testing.skypilot_sdk import FakeSkyLauncher

    fake = FakeSkyLauncher(tmp_path / "sky")
    yield fake
    for name in fake.clusters():
        fake.down(name)
