"""The failover flow's start-up (its run created → the confirm step begins) is no step's and
counts in the RTO: the demo measured 1.17 s of it (#31). What it does there, it does without
asking the API what the engine already knows, and without importing the dry run's sandbox."""

import subprocess
import sys

import pytest
from prefect import flow


def test_a_run_started_from_a_terminal_reads_as_not_deployed_without_asking_the_api(
    prefect_server, monkeypatch
):
    import prefect.runtime.deployment

    from lifeboat_dr.flows.failover import _deployed

    def no_round_trip(*_):
        raise AssertionError("read the flow run from the API again")

    monkeypatch.setattr(prefect.runtime.deployment, "_get_flow_run", no_round_trip)

    @flow
    def started_here() -> bool:
        return _deployed()

    assert started_here() is False


def test_a_deployments_run_reads_as_deployed(monkeypatch):
    import uuid

    from prefect.context import FlowRunContext

    from lifeboat_dr.flows.failover import _deployed

    class Run:
        deployment_id = uuid.uuid4()

    class Context:
        flow_run = Run()

    monkeypatch.setattr(FlowRunContext, "get", classmethod(lambda cls: Context()))
    assert _deployed() is True


@pytest.mark.processes
def test_a_failover_that_is_not_a_dry_run_does_not_import_the_sandbox_and_its_stand_in_trainer(tmp_path):
    """A worker starts a fresh process per run: an import there is start-up time."""
    code = (
        "import sys\n"
        "from lifeboat_dr.flows.failover import failover\n"
        "try:\n"
        f"    failover.fn({str(tmp_path / 'missing.yaml')!r})\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n"
        "print(sorted(m for m in ('lifeboat_dr.flows.sandbox', 'lifeboat_dr.standins.trainer.core') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split("\n")[-2:] == ["[]", ""], out.stdout + out.stderr
