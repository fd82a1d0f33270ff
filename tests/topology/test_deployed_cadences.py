"""`lifeboat deploy demo chat-serving` against a real `prefect server start`: the schedules
Prefect stores are the periods the runbooks' targets need, not the template's 5 minutes and
one minute for everyone (issue #29), and deploy says them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# pools of their own: no worker of another test ever picks up these schedules' runs
POOL, SECONDARY_POOL = "cadence-test", "cadence-test-secondary"


@pytest.mark.processes
def test_deployed_schedules_are_the_periods_the_targets_need(prefect_server_process, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    done = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "deploy", "demo", "chat-serving"]
        + ["--pool", POOL, "--secondary-pool", SECONDARY_POOL],
        cwd=tmp_path,  # its plan file is its own, not the checkout's (tests/checkout.py)
        env={**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_API_URL": prefect_server_process},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "demo: watch every 30s, replicate every 27s, certify every 27s" in done.stdout
    assert "chat-serving: watch every 8s, replicate every 5m, certify every 5m" in done.stdout

    with (
        temporary_settings({PREFECT_API_URL: prefect_server_process}),
        get_client(sync_client=True) as client,
    ):

        def stored(name: str) -> list[float]:
            deployment = client.read_deployment_by_name(name)
            return [s.schedule.interval.total_seconds() for s in deployment.schedules]

        assert stored("watch/demo") == stored("watch/watch-secondary-demo") == [30]
        assert stored("replicate/demo") == stored("certify/demo") == [27]
        assert stored("watch/chat-serving") == stored("watch/watch-secondary-chat-serving") == [8]
        assert stored("replicate/chat-serving") == [300]  # RPO 0 by immutable weights: the template's
        assert stored("prestage/demo") == [3600]  # no target speaks for it: the template's
