"""The two automations that finish a failover whose worker died (`ensure_crash_recovery`), on a
real `prefect server start` with its triggers service: a run that stops beating is marked
Crashed and scheduled again; a run that ended — under any state name, "Stood down" among
them — is left alone. Prefect names a state-change event after the state's *name*
(`prefect.flow-run.Stood down`): an automation expecting only the type names read a duplicate
failover's clean stand-down as silence and fired "no heartbeat: worker lost" on it a minute
later (Prefect refused the Completed -> Crashed change, so the automation's log showed a lost
worker and a failed action for every stand-down). The heartbeats are sent as the flow engine sends them (`prefect.flow-run.heartbeat`,
the run's flow related), a window of 2 x 5 s (Prefect's least) instead of 2 x 30 s."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest

pytestmark = pytest.mark.timeout(180)


def _beat(api_url: str, run, flow) -> None:
    event = {
        "id": str(uuid.uuid4()),
        "occurred": datetime.now(UTC).isoformat(),
        "event": "prefect.flow-run.heartbeat",
        "resource": {"prefect.resource.id": f"prefect.flow-run.{run.id}", "prefect.resource.name": run.name},
        "related": [
            {
                "prefect.resource.id": f"prefect.flow.{flow.id}",
                "prefect.resource.role": "flow",
                "prefect.resource.name": flow.name,
            }
        ],
    }
    httpx.post(f"{api_url}/events", json=[event], timeout=10).raise_for_status()


def _automation_events(api_url: str, run_id) -> list[str]:
    body = {
        "filter": {
            "related": {"id": [f"prefect.flow-run.{run_id}"]},
            "event": {"prefix": ["prefect.automation."]},
        }
    }
    page = httpx.post(f"{api_url}/events/filter", json=body, timeout=10).raise_for_status().json()
    return [e["event"] for e in page["events"]]


def _state_names(client, run_id) -> list[str]:
    return [s.name for s in sorted(client.read_flow_run_states(run_id), key=lambda s: s.timestamp)]


def test_a_stood_down_failover_is_not_crashed_and_rerun_a_silent_one_is(prefect_server_process):
    from prefect import flow as prefect_flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import Flow
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Completed, Running

    from lifeboat_dr.providers.orchestrator.prefect_api import (
        CRASH_AUTOMATION,
        RERUN_AUTOMATION,
        ensure_crash_recovery,
    )

    name = f"failover-{uuid.uuid4().hex[:8]}"  # this test's flow: the suite shares the server
    with (
        temporary_settings({PREFECT_API_URL: prefect_server_process}),
        get_client(sync_client=True) as client,
    ):
        try:
            ensure_crash_recovery(name, heartbeat_s=5, misses=2)  # Prefect's least: 10 s
            failover = prefect_flow(name=name)(lambda: None)
            stood_down, silent = [client.create_flow_run(failover, state=Running()) for _ in range(2)]
            flow = Flow(id=stood_down.flow_id, name=name)
            for run in (stood_down, silent):
                _beat(prefect_server_process, run, flow)
            client.set_flow_run_state(stood_down.id, Completed(name="Stood down", message="stood down"))

            deadline = time.monotonic() + 90
            while "Crashed" not in _state_names(client, silent.id):
                assert time.monotonic() < deadline, (
                    f"the silent run was never crashed: {_state_names(client, silent.id)}"
                )
                time.sleep(1)
            time.sleep(6)  # a triggers-service pass after the stood-down run's window closed too
            assert _state_names(client, stood_down.id) == ["Running", "Stood down"]
            # not even fired (it did: "worker lost", its action refused, on every stand-down)
            assert _automation_events(prefect_server_process, stood_down.id) == []
            assert "prefect.automation.action.executed" in _automation_events(
                prefect_server_process, silent.id
            )
            assert _state_names(client, silent.id)[:2] == ["Running", "Crashed"]
            deadline = time.monotonic() + 60
            while client.read_flow_run(silent.id).state.name != "Scheduled":  # and given to a worker again
                assert time.monotonic() < deadline, (
                    f"the crashed run was not re-scheduled: {_state_names(client, silent.id)}"
                )
                time.sleep(1)
        finally:
            for a in client.read_automations():
                if a.name in (CRASH_AUTOMATION, RERUN_AUTOMATION):
                    client.delete_automation(a.id)
