"""The Compute contract (tests/contracts/compute.py) on every backend: local processes, the
scripted fake, and SkyPilot over its fake launcher (testing/skypilot_sdk.py)."""

import itertools

import pytest
import yaml

from lifeboat_dr.providers.compute.base import JobSpec, PlanOption
from lifeboat_dr.providers.compute.fake import FakeCompute
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute
from tests.contracts.compute import ComputeContract, MakeJob


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


class TestSkyPilotCompute(ComputeContract):
    """Everything above SkyPilot's API server is production code: task building, the job
    bookkeeping, error mapping. The launcher runs each task's `run:` as a local process."""

    @pytest.fixture
    def compute(self, launcher):
        yield from _torn_down(SkyPilotCompute(launcher=launcher, offline=True))

    @pytest.fixture
    def option(self) -> PlanOption:
        return PlanOption(
            infra="aws/us-west-2", instance_type=None, accelerators="A100:8", use_spot=False, hourly_usd=None
        )

    @pytest.fixture
    def make_job(self, tmp_path) -> MakeJob:
        numbers = itertools.count(1)

        def make(command: str, **fields) -> JobSpec:
            task = tmp_path / f"task-{next(numbers)}.sky.yaml"
            task.write_text(yaml.safe_dump({"name": "rb", "run": command}))
            return JobSpec(name="rb", task_yaml=task, **fields)

        return make

    @pytest.mark.xfail(
        strict=True,
        reason="SkyPilot 0.14.1's SDK reports a cluster job's status (FAILED), never its exit code: "
        "the skylet stores exit_codes, but only the managed-jobs controller reads them",
    )
    def test_a_failing_job_reports_its_exit_code(self, compute, option, make_job):
        super().test_a_failing_job_reports_its_exit_code(compute, option, make_job)
