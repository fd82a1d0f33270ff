"""The `certify` flow on a real (test-harness) Prefect server: RPO artifact and breach event."""

import asyncio
from pathlib import Path

import yaml

from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from tests.runbook_yaml import two_site_runbook


def _runbook(tmp_path, rpo):
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    replicate(primary, secondary, write_checkpoint(primary, "dcp", 100))
    path = tmp_path / "rb.yaml"
    path.write_text(
        two_site_runbook(
            "flow-test",
            primary=f"file://{primary.root}",
            secondary=f"file://{secondary.root}",
            checkpoint={"layout": "dcp"},
            targets={"rpo": rpo},
        )
    )
    return str(path)


async def _artifact(key):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def test_certify_flow_records_the_rpo_as_a_table_artifact(prefect_server, tmp_path):
    from lifeboat_dr.flows.certify import certify

    row = certify(_runbook(tmp_path, "1h"))
    assert row["certified_step"] == 100 and row["breached"] is False and row["exit"] == 0
    artifacts = asyncio.run(_artifact("rpo-flow-test"))
    assert artifacts and all(a.type == "table" for a in artifacts)
    assert any("certified_step" in str(a.data) for a in artifacts)


def test_certify_flow_over_target_emits_the_breach_event(prefect_server, tmp_path):
    from prefect.client.orchestration import get_client

    from lifeboat_dr.flows.certify import BREACH_EVENT, certify

    row = certify(_runbook(tmp_path, 0))  # any age exceeds a zero RPO target
    assert row["breached"] is True and row["exit"] == 1
    assert row["rpo_s"] > 0

    async def breach_events():
        async with get_client() as client:
            for _ in range(100):  # events reach the server asynchronously
                r = await client._client.post(
                    "/events/filter",
                    json={
                        "filter": {
                            "event": {"name": [BREACH_EVENT]},
                            "resource": {"id": ["lifeboat.runbook.flow-test"]},
                        },
                        "limit": 10,
                    },
                )
                events = r.json()["events"]
                if events:
                    return events
                await asyncio.sleep(0.1)
            return []

    events = asyncio.run(breach_events())
    assert events and events[0]["resource"]["prefect.resource.id"] == "lifeboat.runbook.flow-test"
    assert events[0]["payload"]["certified_step"] == 100 and events[0]["payload"]["breached"] is True


def test_prefect_yaml_schedules_the_certify_deployment():
    doc = yaml.safe_load((Path(__file__).parents[2] / "prefect.yaml").read_text())
    (dep,) = [d for d in doc["deployments"] if d["entrypoint"] == "lifeboat_dr.flows.certify:certify"]
    assert dep["schedules"] and dep["parameters"]["runbook"]
