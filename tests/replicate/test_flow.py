"""The `replicate` flow on a local Prefect server: copies, records lag, emits the event."""

from __future__ import annotations

import asyncio
import time

import pytest

pytestmark = pytest.mark.integration


def _events(name: str) -> list[dict]:
    from prefect.client.orchestration import get_client

    async def query():
        async with get_client() as client:
            r = await client._client.post("/events/filter", json={"filter": {"event": {"name": [name]}}})
            return r.json().get("events", [])

    for _ in range(40):  # events reach the server asynchronously
        found = asyncio.run(query())
        if found:
            return found
        time.sleep(0.25)
    return []


def test_a_replica_later_than_the_rpo_target_raises_a_lag_exceeded_event(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, prefect_server
):
    from prefect.events.worker import EventsWorker

    from lifeboat_dr.core.replication.lag import LAG_EVENT, LagLog
    from lifeboat_dr.flows.replicate import replicate

    runbook_file.write_text(runbook_file.read_text().replace("rpo: 30m", "rpo: 1ms"))
    for step in (100, 200, 300):
        write_checkpoint(primary, f"step-{step:06d}", step)
    lag_log = tmp_path / "lag.jsonl"
    summary = replicate(str(runbook_file), lag_log=str(lag_log))
    EventsWorker.drain_all()
    events = _events(LAG_EVENT)

    assert summary["failed"] == {} and summary["lag_exceeded"] == 3  # 300, 200 newest; 100 every 100th
    assert {e["payload"]["checkpoint"] for e in events} == {
        "step-000300",
        "step-000200",
        "step-000100",
    }
    assert all(e["resource"]["prefect.resource.id"] == "lifeboat.runbook.trainer" for e in events)
    assert [r.step for r in LagLog(lag_log).read()] == [300, 200, 100]
    assert len({i.key.rsplit("/", 1)[0] for i in secondary.list() if not i.key.startswith("_lifeboat/")}) == 3
