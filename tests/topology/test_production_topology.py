"""The production topology, for real: Prefect server on PostgreSQL, two process workers, two
`lifeboat serve` replicas sharing their state through a store. One replica is killed: alerts
still reach a failover through the other. The worker running a failover is killed: the run
is marked Crashed (no heartbeat), scheduled again, and the other worker finishes it under the
same run id; the ledger says it was a re-run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lifeboat_dr.testing.prefect_servers import free_port
from tests.alertmanager_webhooks import alerting_runbook, two_sources
from tests.flow_run_processes import flow_run_process, kill_flow_runs_on

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOKEN = "topology-token"


def _spawn(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:  # the child keeps its own copy of the file
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _kill(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{url} did not come up")
            time.sleep(0.3)


def _post(port: int, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/alerts/alertmanager",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return out


def _runs_of(client, deployment_id):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    )


def _until(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f}s")


def test_postgres_control_plane_survives_a_serve_replica_and_a_worker_dying(
    prefect_server_postgres, tmp_path
):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled

    from lifeboat_dr.core.ledger import LedgerFile

    api = prefect_server_postgres
    alerted = alerting_runbook(tmp_path, "alerted")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",  # as `lifeboat deploy` says to start workers
        "LIFEBOAT_STATE_DIR": f"file://{tmp_path}/shared-state",
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_ALERTMANAGER_TOKEN": TOKEN,
    }
    deploy = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "deploy", "runbooks/demo.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-2000:]
    prefect = str(BIN / "prefect")
    workers = [
        _spawn(
            [prefect, "worker", "start", "--pool", "lifeboat", "--name", f"w{i}"], env, tmp_path / f"w{i}.log"
        )
        for i in (1, 2)
    ]
    ports = [free_port(), free_port()]
    replicas = [
        _spawn(
            [sys.executable, "-m", "lifeboat_dr", "serve", str(alerted), "--port", str(p)],
            env,
            tmp_path / f"serve{p}.log",
        )
        for p in ports
    ]
    try:
        for p in ports:
            _wait_http(f"http://127.0.0.1:{p}/healthz")
        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            failover = client.read_deployment_by_name("failover/failover")

            # One serve replica dies between the two alert groups: the other one, reading the
            # shared state, sees the first group's vote and confirms; the automation starts the failover.
            first_group, second_group = two_sources("alerted")
            assert _post(ports[0], first_group)["events"] >= 1
            _kill(replicas[0])
            second = _post(ports[1], second_group)
            assert second["runbooks"]["alerted"].startswith("confirmed: 2 of 2"), second

            def alerted_run():
                return [
                    r for r in _runs_of(client, failover.id) if r.parameters.get("runbook") == str(alerted)
                ]

            runs = _until("a failover run for the alerted runbook", alerted_run, 60)
            assert len(runs) == 1
            client.set_flow_run_state(
                runs[0].id, Cancelled(message="topology test: alert path proven"), force=True
            )

            # A dry-run failover; the worker running it dies (with the run's process) mid-way.
            run = client.create_flow_run_from_deployment(
                failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True}
            )
            ledger = LedgerFile(tmp_path / "ledger.jsonl")

            def mid_failover():
                mine = [e for e in ledger.read("demo") if e.run_id == str(run.id)]
                return mine and mine[0].phases.get("fenced")

            _until("the failover reaching `fenced`", mid_failover, 120, every=0.2)
            pid = flow_run_process(str(run.id))
            assert pid is not None, f"no process runs flow run {run.id}"
            victim = next(w for w in workers if w.pid in _ancestors(pid))
            os.kill(pid, signal.SIGKILL)  # the host dies: the worker and the run's process with it
            _kill(victim)
            killed_at = time.monotonic()

            final = _until(
                "the failover re-run to a final state",
                lambda: (
                    (r := client.read_flow_run(run.id)).state.is_final()
                    and r.state.type.value != "CRASHED"
                    and r
                ),
                300,
                every=1,
            )
            history = client.read_flow_run_states(run.id)
            states = [s.type.value for s in history]
            crash = next((s for s in history if s.type.value == "CRASHED"), None)
            assert crash is not None and "no heartbeat" in (crash.message or ""), states
            print(f"killed -> completed: {time.monotonic() - killed_at:.1f}s; states {states}")
            assert final.state.is_completed(), (final.state.message, states)
            assert final.run_count >= 2
            entry = next(e for e in ledger.read("demo") if e.run_id == str(run.id))
            assert entry.outcome == "completed"
            assert "re-run" in entry.notes and "worker was lost" in entry.notes["re-run"]
    finally:
        for p in replicas + workers:
            _kill(p)
        kill_flow_runs_on(api)  # the cancelled alert-path run, in a session of its own
