"""The guard's event reaches Prefect from a rank that exits at once after sending it."""

import asyncio
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from lifeboat_dr.providers.orchestrator.events import PrefectEvents, events_from_env
from lifeboat_dr.providers.orchestrator.fake_events import FileEvents

REPO = Path(__file__).resolve().parents[2]


def test_the_sink_is_the_file_for_drills_prefect_when_configured_else_none(tmp_path):
    sink = events_from_env({"LIFEBOAT_GUARD_EVENTS": f"file://{tmp_path}/ev.jsonl", "PREFECT_API_URL": "x"})
    assert isinstance(sink, FileEvents) and sink.path == tmp_path / "ev.jsonl"
    assert isinstance(events_from_env({"PREFECT_API_URL": "http://127.0.0.1:4200/api"}), PrefectEvents)
    assert events_from_env({}) is None


def test_the_file_fake_keeps_the_first_of_each_id_as_prefect_would(tmp_path):
    sink = FileEvents(tmp_path / "ev.jsonl")
    for rank in (0, 1):
        sink.emit("lifeboat.training.fault", {"prefect.resource.id": "j"}, {"reported_by": rank}, id="same")
    assert [e["payload"]["reported_by"] for e in sink.read()] == [0, 1]
    assert [e["payload"]["reported_by"] for e in sink.read(unique=True)] == [0]


def _events(name: str) -> list[dict]:
    from prefect.client.orchestration import get_client

    async def query():
        async with get_client() as client:
            r = await client._client.post("/events/filter", json={"filter": {"event": {"name": [name]}}})
            return r.json().get("events", [])

    for _ in range(40):  # the server stores events asynchronously
        if found := asyncio.run(query()):
            return found
        asyncio.run(asyncio.sleep(0.25))
    return []


@pytest.mark.processes
def test_a_rank_that_exits_right_after_emitting_still_delivers_its_event(prefect_server):
    from prefect.settings import PREFECT_API_URL

    event_id = str(uuid.uuid4())
    child = textwrap.dedent(f"""
        import os
        from lifeboat_dr.providers.orchestrator.events import events_from_env
        events_from_env().emit(
            "lifeboat.training.fault.test",
            {{"prefect.resource.id": "lifeboat.job.t", "lifeboat.fault": "hang", "lifeboat.rank": "1"}},
            {{"kind": "hang", "rank": 1, "step": 42}},
            id="{event_id}",
        )
        os._exit(83)  # as the guard ends a rank: no interpreter shutdown, no atexit
    """)
    env = {k: v for k, v in os.environ.items() if k != "LIFEBOAT_GUARD_EVENTS"}
    env |= {"PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 83, done.stderr
    (event,) = [e for e in _events("lifeboat.training.fault.test") if e["id"] == event_id]
    assert event["payload"] == {"kind": "hang", "rank": 1, "step": 42}
    assert event["resource"]["lifeboat.rank"] == "1"
