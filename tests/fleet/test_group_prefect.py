"""The fleet run created from its deployment once per idempotency key, on a real Prefect
server: the same key gives the same run, and two runbooks of one region grouping through
`group_outage` give one fleet-failover run; "has it ended" read from the run's state."""

from __future__ import annotations

import threading
import time

import pytest

from lifeboat_dr.core.fleet.group import group_key, group_outage, region_of
from lifeboat_dr.kernel.errors import NotFound, StandDown
from lifeboat_dr.providers.orchestrator import prefect_api
from lifeboat_dr.testing.memory_store import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
REGION = region_of("aws/us-east-1")


@pytest.fixture(scope="module")
def fleet_deployment(prefect_server):
    from lifeboat_dr.flows.fleet_failover import fleet_failover

    fleet_failover.to_deployment(name="fleet-failover").apply()
    return prefect_api.FLEET_DEPLOYMENT


def _runs(key_part: str) -> list:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [r for r in client.read_flow_runs() if (r.idempotency_key or "").startswith(key_part)]


def test_the_same_key_gives_the_same_fleet_run_and_a_new_run_has_not_ended(fleet_deployment):
    first = prefect_api.start_run_once(
        fleet_deployment, {"runbooks": ["a.yaml"], "dry_run": True}, "fleet-k1"
    )
    again = prefect_api.start_run_once(
        fleet_deployment, {"runbooks": ["b.yaml"], "dry_run": True}, "fleet-k1"
    )
    other = prefect_api.start_run_once(
        fleet_deployment, {"runbooks": ["a.yaml"], "dry_run": True}, "fleet-k2"
    )

    assert first == again != other
    assert len(_runs("fleet-k1")) == 1
    assert prefect_api.run_ended(first) is False  # scheduled, no worker: not ended


def test_a_cancelled_fleet_run_has_ended_and_an_unknown_one_is_not_found(fleet_deployment):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    run = prefect_api.start_run_once(fleet_deployment, {"runbooks": ["a.yaml"], "dry_run": True}, "fleet-k3")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run, Cancelled(), force=True)
    assert prefect_api.run_ended(run) is True
    with pytest.raises(NotFound):
        prefect_api.run_ended("00000000-0000-0000-0000-000000000000")
    with pytest.raises(NotFound, match="no deployment nope/nope"):
        prefect_api.start_run_once("nope/nope", {}, "k")


def test_two_runbooks_of_one_region_give_one_fleet_failover_run(fleet_deployment):
    store = MemoryStore()

    def start(runbooks, key):
        return prefect_api.start_run_once(fleet_deployment, {"runbooks": runbooks, "dry_run": True}, key)

    def group(runbook):
        return group_outage(
            store,
            region=REGION,
            runbook=runbook,
            run_id=f"run-{runbook}",
            members=("llama-70b", "mistral-sft"),
            window_s=1.5,
            start_fleet=start,
            run_ended=prefect_api.run_ended,
            lease_s=3.0,
        )

    out = {}
    taker = threading.Thread(target=lambda: out.setdefault("grouped", group("llama-70b")))
    taker.start()
    deadline = time.monotonic() + 30
    while not any(i.key == group_key(REGION) for i in store.list(group_key(REGION))):  # the window is open
        assert time.monotonic() < deadline and taker.is_alive(), out
        time.sleep(0.05)
    with pytest.raises(StandDown):
        group("mistral-sft")
    taker.join(30)
    grouped = out["grouped"]

    assert grouped.runbooks == ("llama-70b", "mistral-sft")
    ours = [
        r for r in _runs(f"fleet-{REGION}-") if set(r.parameters["runbooks"]) <= {"llama-70b", "mistral-sft"}
    ]
    assert [str(r.id) for r in ours] == [grouped.fleet_run_id]  # other tests' fleet runs share the server
    with pytest.raises(StandDown, match=f"fleet run {grouped.fleet_run_id} of {REGION} is under way"):
        group("mistral-sft")  # its alert again: the run is scheduled, not ended
