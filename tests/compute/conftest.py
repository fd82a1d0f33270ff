"""Compute fixtures: each backend of the contract suite is one small factory."""

from __future__ import annotations

import sys

import pytest

from providers.compute.base import JobSpec, PlanOption
from providers.compute.fake import FakeCompute
from providers.compute.local import LocalCompute

PY = sys.executable


@pytest.fixture(params=["local", "fake"])
def compute(request, tmp_path):
    """Every backend that must pass the contract; nothing may be left running after a test."""
    backend = LocalCompute(tmp_path / "clusters") if request.param == "local" else FakeCompute()
    yield backend
    for name in backend.clusters():
        backend.teardown(name)


@pytest.fixture
def local_option():
    return PlanOption(infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0)


@pytest.fixture
def echo_job(tmp_path):
    return JobSpec(name="contract", command="echo lifeboat-contract-ok", workdir=tmp_path)
