"""Prefect's Cancel on a failover paused at its gate, run by a real process worker (which
also reacts to Cancelling: it stops the run's process). The run ends at once, Cancelled,
the rejection recorded in the ledger, nothing fenced."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flow_run_processes import kill_flow_runs_on

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _until(what, fn, timeout, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := fn():
            return value
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def test_cancel_under_a_process_worker_is_a_recorded_rejection(prefect_server_process, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelling

    from lifeboat_dr.core.ledger import LedgerFile

    api = prefect_server_process
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_STATE_DIR": str(tmp_path / "state"),
    }
    env.pop("SLACK_BOT_TOKEN", None)
    deploy = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "deploy", "runbooks/demo.yaml"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-2000:]
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", "lifeboat", "--name", "w1"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            failover = client.read_deployment_by_name("failover/failover")
            run = client.create_flow_run_from_deployment(
                failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True, "approval": "wait"}
            )
            _until(
                "the failover paused at its gate", lambda: client.read_flow_run(run.id).state.is_paused(), 300
            )
            client.set_flow_run_state(run.id, Cancelling(message="cancelled in the UI"), force=True)
            cancelled_at = time.monotonic()
            final = _until(
                "the run to end", lambda: (s := client.read_flow_run(run.id).state).is_final() and s, 120
            )
            took = time.monotonic() - cancelled_at
        assert final.type.value == "CANCELLED" and took < 30, (final, took)
        (entry,) = [e for e in LedgerFile(tmp_path / "ledger.jsonl").read("demo") if e.run_id == str(run.id)]
        assert (
            entry.outcome == "aborted"
            and "cancelled in Prefect: cancelled in the UI" in entry.notes["approval"]
        )
        assert "fenced" not in entry.phases
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded machine: the worker's shutdown is no part of the test
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        kill_flow_runs_on(api)
