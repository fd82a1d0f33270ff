"""On a real local Prefect server: a posted alert, with the watch flow's stall, fails over.

The chain under test is production's: `watch` flow run -> signal log; Alertmanager POST ->
receiver -> quorum -> `lifeboat.outage.confirmed` event -> prefect.yaml's automation ->
a run of the real failover flow's deployment, its parameters checked against the flow's
schema by the server. No worker runs it: the test is about the run being created.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest

from lifeboat_dr.flows.automation import failover_triggers
from lifeboat_dr.shell.alertmanager import AlertmanagerSettings, alertmanager_routes
from lifeboat_dr.shell.server import create_app
from tests.runbook_yaml import two_site_runbook

pytestmark = pytest.mark.integration
TOKEN = "integration-token"


@pytest.fixture(scope="module")
def failover_deployment(prefect_server):
    """The real failover flow, deployed with the real trigger from prefect.yaml."""
    from prefect.events.worker import EventsWorker

    from lifeboat_dr.flows.failover import failover

    EventsWorker.drain_all()
    return failover.to_deployment(name="failover", triggers=failover_triggers()).apply()


def write_runbook(tmp_path, last_step_at: datetime):
    hb = tmp_path / "heartbeat.json"
    beat = {"step": 4100, "time": last_step_at.isoformat()}
    hb.write_text(json.dumps(beat))
    (tmp_path / "primary").mkdir()
    path = tmp_path / "itest.yaml"
    path.write_text(
        two_site_runbook(
            "itest",
            job="echo resumed",
            detection={
                "signals": ["gpu_health", "training_progress", "provider", "alertmanager"],
                "quorum": 2,
                "window": "5m",
                "stall_after": "10m",
                "heartbeat": str(hb),
            },
        )
    )
    return path


def alert(status: str, starts_at: datetime, fingerprint: str = "5e5e5e5e5e5e5e5e") -> dict:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="NodeNotReady"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "lifeboat",
        "groupLabels": {"alertname": "NodeNotReady"},
        "commonLabels": {"lifeboat_runbook": "itest"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [
            {
                "status": status,
                "labels": {"alertname": "NodeNotReady", "lifeboat_runbook": "itest"},
                "annotations": {"summary": "4 of 16 training nodes NotReady"},
                "startsAt": starts_at.isoformat(),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph",
                "fingerprint": fingerprint,
            }
        ],
    }


async def post(app, body: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as http:
        r = await http.post("/alerts/alertmanager", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    return r


async def failover_runs(deployment_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async with get_client() as client:
        return await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )


async def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


async def stored_events(name: str):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter

    async with get_client() as client:
        page = await client.read_events(EventFilter(event=EventNameFilter(name=[name])), limit=50)
        return page.events


def test_a_stall_plus_a_posted_alert_fail_over_and_resolution_cancels(
    failover_deployment, tmp_path, monkeypatch
):
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from lifeboat_dr.flows.watch import watch

    monkeypatch.setenv("LIFEBOAT_STATE_DIR", str(tmp_path / "state"))
    last_step_at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=25)
    nodes_lost_at = datetime.now(UTC) - timedelta(minutes=2)
    runbook = write_runbook(tmp_path, last_step_at)
    settings = AlertmanagerSettings(bearer_token=TOKEN, runbooks=[runbook])
    app = create_app(alertmanager_routes(settings))

    async def scenario():
        # 1. The scheduled watch run sees the stalled job: one signal, suspected, no failover.
        decision = await anyio.to_thread.run_sync(lambda: watch(str(runbook)))
        assert decision["state"] == "suspected" and decision["voting"] == ["training_progress"]
        await wait_for(lambda: stored_events("lifeboat.outage.suspected"))
        assert await failover_runs(failover_deployment) == []

        # 2. Alertmanager says the nodes are NotReady: two signals agree -> automation -> run.
        r = await post(app, alert("firing", nodes_lost_at))
        assert r.json()["runbooks"]["itest"].startswith("confirmed: 2 of 2")
        (run,) = await wait_for(lambda: failover_runs(failover_deployment))
        assert run.parameters["runbook"] == str(runbook)
        evidence = run.parameters["evidence"]
        assert [line.split(":")[0] for line in evidence] == ["alertmanager", "training_progress"]
        assert "4 of 16 training nodes NotReady" in evidence[0] and "at step 4100" in evidence[1]
        # The outage began when the job stopped stepping, before the nodes were reported lost.
        assert run.parameters["outage_started_at"] == last_step_at.isoformat().replace("+00:00", "Z")
        assert run.state.type.value == "SCHEDULED"

        # 3. A second run that a worker already started must survive the resolution.
        async with get_client() as client:
            started = await client.create_flow_run_from_deployment(
                failover_deployment, parameters={"runbook": str(runbook)}
            )
            await client.set_flow_run_state(started.id, Running(), force=True)

            # 4. The alert resolves: one signal left, so the pending failover is cancelled.
            r = await post(app, alert("resolved", nodes_lost_at))
            assert r.json()["cancelled"] == [str(run.id)]
            assert (await client.read_flow_run(run.id)).state.type.value == "CANCELLED"
            assert (await client.read_flow_run(started.id)).state.type.value == "RUNNING"

    anyio.run(scenario)
