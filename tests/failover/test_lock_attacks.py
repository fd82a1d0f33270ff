"""The runbook's failover lock, attacked (#26): nobody who reaches Prefect can squat it, a
holder that died gives it up after its lease (and someone is told), and a Prefect server
killed and restarted while a failover holds it does not leak it. Real failover flows, each
in its own process as a worker would run it, on a real `prefect server start`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.testing.prefect_servers import free_port
from tests.flow_run_processes import printed_result

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 5  # LIFEBOAT_LOCK_LEASE for these runs: short, so a dead holder lapses quickly

RUN = """
import json, sys
from lifeboat_dr.flows.failover import failover, outcome_of
state = failover(runbook=sys.argv[1], force=True, evidence=["test: the primary is down"],
                 approval=sys.argv[2], return_state=True)
print("RESULT " + json.dumps(outcome_of(state)))
"""


def local_runbook(tmp_path, name: str) -> Path:
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), name, root=tmp_path / "sites")
    doc = rb.model_dump(mode="json", exclude_none=True) | {"name": name}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def failover_process(api: str, path: Path, approval: str, tmp_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PREFECT_API_URL": api,
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_LOCK_LEASE": str(LEASE_S),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(path), approval],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def outcome(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=240)
    result = printed_result(out)
    assert result, f"exit {proc.returncode}: {err[-3000:]}"
    return result


def paused_at_the_gate(tmp_path, name: str, timeout: float = 180) -> str:
    """The run id of the failover of `name` that is waiting for a person (its ledger says so)."""
    ledger, deadline = LedgerFile(tmp_path / "ledger.jsonl"), time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = [
            e for e in ledger.read(name) if "approval_requested" in e.phases and e.outcome == "in-progress"
        ]
        if asked:
            return asked[0].run_id
        time.sleep(0.5)
    pytest.fail(f"no failover of {name} reached its approval gate")


def kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def entry_of(tmp_path, name: str, run_id: str):
    return next(e for e in LedgerFile(tmp_path / "ledger.jsonl").read(name) if e.run_id == run_id)


def test_a_slot_set_by_hand_through_prefects_api_stands_no_failover_down(prefect_server_process, tmp_path):
    api, path = prefect_server_process, local_runbook(tmp_path, "squat")
    squat = httpx.post(
        f"{api}/v2/concurrency_limits/",
        json={"name": "lifeboat-failover-squat", "limit": 1, "active_slots": 1},
        timeout=30,
    )
    assert squat.status_code in (200, 201), squat.text  # open-source Prefect lets anyone do it

    result = outcome(failover_process(api, path, "approve", tmp_path))

    assert result["outcome"] == "completed", result


def test_a_holder_that_died_is_reclaimed_after_its_lease_and_someone_is_told(
    prefect_server_process, tmp_path
):
    api, path = prefect_server_process, local_runbook(tmp_path, "died")
    holder = failover_process(api, path, "wait", tmp_path)
    dead = paused_at_the_gate(tmp_path, "died")
    kill(holder)  # the worker dies while its failover waits for a person: nothing releases the lock
    time.sleep(LEASE_S + 1)

    result = outcome(failover_process(api, path, "approve", tmp_path))

    assert result["outcome"] == "completed", result
    notes = entry_of(tmp_path, "died", result["run_id"]).notes
    assert "lock reclaimed" in notes and dead in notes["lock reclaimed"], notes
    assert [e["payload"]["holder_run_id"] for e in reclaimed_events(api)] == [dead]


def reclaimed_events(api: str, timeout: float = 30) -> list[dict]:
    """The `lifeboat.lock.reclaimed` events the server stored (it persists them in batches)."""
    deadline = time.monotonic() + timeout
    while True:
        events = httpx.post(
            f"{api}/events/filter",
            json={"filter": {"event": {"name": ["lifeboat.lock.reclaimed"]}}, "limit": 10},
            timeout=30,
        ).json()["events"]
        if events or time.monotonic() > deadline:
            return events
        time.sleep(1)


@contextlib.contextmanager
def prefect_server_at(home: Path):
    """`prefect server start` on SQLite in `home`, on a fresh port; yields (API URL, process)."""
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "2",
        "PREFECT_API_URL": "",
    }
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url, deadline = f"http://127.0.0.1:{port}/api", time.monotonic() + 120
    try:
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "prefect server start did not come up"
            time.sleep(0.5)
        yield url, proc
    finally:
        kill(proc)


def test_a_prefect_server_killed_and_restarted_mid_failover_leaks_no_lock(tmp_path):
    home, path = tmp_path / "prefect-home", local_runbook(tmp_path, "restart")
    home.mkdir()
    with prefect_server_at(home) as (api, server):
        holder = failover_process(api, path, "wait", tmp_path)
        held_by = paused_at_the_gate(tmp_path, "restart")
        os.killpg(server.pid, signal.SIGKILL)  # the control plane's host dies, and the worker with it
        kill(holder)
        killed = time.monotonic()
    with prefect_server_at(home) as (api, _):
        started = time.monotonic()
        result = outcome(failover_process(api, path, "approve", tmp_path))

    assert result["outcome"] == "completed", result
    print(f"restarted {started - killed:.1f}s after the kill; the failover proceeded at once")
    notes = entry_of(tmp_path, "restart", result["run_id"]).notes
    assert held_by in notes.get("lock reclaimed", ""), notes
