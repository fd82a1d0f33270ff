"""The Compute contract (tests/contracts/compute.py) on the local backend and the fake."""

import pytest

from providers.compute.fake import FakeCompute
from providers.compute.local import LocalCompute
from tests.contracts.compute import ComputeContract


def _torn_down(backend):
    yield backend
    for name in backend.clusters():
        backend.teardown(name)


class TestLocalCompute(ComputeContract):
    @pytest.fixture
    def compute(self, tmp_path):
        yield from _torn_down(LocalCompute(tmp_path / "clusters"))


class TestFakeCompute(ComputeContract):
    @pytest.fixture
    def compute(self):
        yield from _torn_down(FakeCompute())
