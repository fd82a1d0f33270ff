"""The failover flow groups a confirmed outage with its region's (`flows/grouping.py`), on a real
Prefect server with the fleet-failover deployment: two runbooks of one region confirmed within
the window give one fleet run and two stood-down entries, one naming it; the alert again while
it is under way stands down naming it (twice); a forged join marker and a runbook of another
region or lock store (the `fleet` parameter as deploy wrote it) are not grouped (forged); Prefect answering 503 when the fleet run is
created starts nothing, fails the run naming the store, and the re-run of that run id starts
the one fleet run; a reply lost after the run was created gives that same run (half-done)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prefect import flow
from prefect.runtime import flow_run as current_run

from lifeboat_dr.core.fleet.group import group_key, marker_prefix, region_of
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.failover import failover, run_failover
from lifeboat_dr.flows.grouping import FleetMember, fellows, should_group
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.runbooks.loader import load_runbook
from tests.approval.conftest import in_thread, wait_until
from tests.fleet.fleet_runbooks import fleet_runbook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
REGION = region_of("aws/us-east-1")
STARTED = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
EVIDENCE = ["aws-health: us-east-1 EC2 outage", "probe: 3/3 unreachable"]


def write_region(folder: Path, window: str) -> dict[str, str]:
    """Two runbooks of aws/us-east-1 grouping in one lock store, one of another region, and one
    of this region grouping in another store."""
    lock = f"file://{folder / 'fleet-locks'}"
    grouping = (lock, window)
    return {
        "llama": str(fleet_runbook(folder, "llama", gpus=64, grouping=grouping)),
        "mistral": str(fleet_runbook(folder, "mistral", gpus=32, grouping=grouping)),
        "west": str(fleet_runbook(folder, "west", gpus=8, primary="aws/us-west-2", grouping=grouping)),
        "stray": str(
            fleet_runbook(folder, "stray", gpus=8, grouping=(f"file://{folder / 'other-locks'}", window))
        ),
        "lock": lock,
    }


@pytest.fixture
def region(tmp_path):
    """`write_region` with a 1 s window: for the tests where one runbook confirms at a time."""
    return write_region(tmp_path, "1s")


@pytest.fixture
def fleet_deployment(prefect_server):
    from lifeboat_dr.flows.fleet_failover import fleet_failover

    fleet_failover.to_deployment(name="fleet-failover").apply()


def fleet_runs(region: dict) -> list:
    """The fleet runs of this region started for this test's runbooks (the server is the session's)."""
    from prefect.client.orchestration import get_client

    mine = {region[n] for n in ("llama", "mistral")}
    with get_client(sync_client=True) as client:
        return [
            r
            for r in client.read_flow_runs()
            if (r.idempotency_key or "").startswith(f"fleet-{REGION}-")
            and mine & set(r.parameters["runbooks"])
        ]


def members(region: dict, *names: str) -> list[FleetMember]:
    """The `fleet` parameter `lifeboat deploy` gives the failover, for these runbooks."""
    return [FleetMember.of(load_runbook(region[n]), region[n]) for n in names]


def confirmed(path: str, fleet: list[FleetMember]):
    """The automation's failover run for one confirmed outage, its final state."""
    return failover(
        runbook=path, fleet=fleet, outage_started_at=STARTED, evidence=EVIDENCE, return_state=True
    )


def test_two_runbooks_of_one_region_give_one_fleet_run_and_the_alert_again_stands_down(
    tmp_path, fleet_deployment, ledger_path
):
    region = write_region(tmp_path, "10s")  # the second failover's start-up on a loaded machine fits in it
    fleet = members(region, "llama", "mistral", "west", "stray")
    lock = open_store(region["lock"])
    forged = {"runbook": "intruder", "run_id": "x", "confirmed_at": datetime.now(UTC).isoformat()}
    lock.put(marker_prefix(REGION) + "intruder", json.dumps(forged).encode())  # a forged join marker

    taker = in_thread(confirmed, region["llama"], fleet)
    wait_until(lambda: list(lock.list(group_key(REGION))), timeout=60)  # its window is open
    joined = confirmed(region["mistral"], fleet)
    taker.join(120)
    took = taker.out["value"]

    assert took.is_completed() and took.name == "Stood down", took.message
    assert joined.is_completed() and joined.name == "Stood down", joined.message
    (run,) = fleet_runs(region)
    assert took.result()["fleet_run_id"] == str(run.id)
    assert run.parameters == {  # the members' paths and the outage start, never one's evidence
        "runbooks": [region["llama"], region["mistral"]],
        "outage_started_at": STARTED.isoformat(),
    }
    assert f"grouped into fleet run {run.id} (llama, mistral)" in took.message
    assert "which another run forms" in joined.message
    (llama,) = LedgerFile(ledger_path).read("llama")
    assert (llama.outcome, llama.notes["fleet run"], llama.phases["outage_start"]) == (
        "stood-down",
        str(run.id),
        STARTED,
    )
    assert llama.notes["evidence"] == "; ".join(EVIDENCE)
    assert [e.outcome for e in LedgerFile(ledger_path).read("mistral")] == ["stood-down"]

    again = confirmed(region["mistral"], fleet)  # its alert again while the fleet run is scheduled
    assert again.name == "Stood down" and f"fleet run {run.id} of {REGION} is under way" in again.message
    assert len(fleet_runs(region)) == 1


def test_who_groups_with_whom(region, tmp_path, capsys):
    llama = load_runbook(region["llama"])
    every = members(region, "llama", "mistral", "west", "stray")
    forged = FleetMember(
        name="intruder", path="/nowhere/forged.yaml", region="gcp-europe-west4", lock_store="x"
    )

    group = fellows(llama, region["llama"], [*every, forged])
    assert group.paths == {"llama": region["llama"], "mistral": region["mistral"]}
    assert (group.region, group.lock_store) == (REGION, region["lock"])
    said = capsys.readouterr().out
    assert f"fleet: stray groups in file://{tmp_path / 'other-locks'}, not {region['lock']}" in said
    assert "intruder" not in said  # another region's: not this runbook's business
    assert fellows(llama, region["llama"], members(region, "llama", "west")) is None  # alone in its region

    flags = {"fleet": every, "gated": False, "dry_run": False, "force": False}
    assert should_group(llama, **flags)
    for flag in ("gated", "dry_run", "force"):  # a fleet member, a rehearsal, a human's single failover
        assert not should_group(llama, **flags | {flag: True})
    assert not should_group(llama, **flags | {"fleet": None})
    alone = llama.model_copy(update={"fleet": llama.fleet.model_copy(update={"group_window": None})})
    assert not should_group(alone, **flags)


@flow
def confirmed_as(run_id: str, path: str, fleet: list[FleetMember]):
    """One failover run id, as its re-run after a lost worker is (the same id again)."""
    return run_failover(
        path, run_id=run_id, flow_run=current_run, fleet=fleet, outage_started_at=STARTED, evidence=EVIDENCE
    )


@pytest.fixture
def prefect_behind_proxy(fleet_deployment):
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    from lifeboat_dr.testing.emulators import ThrottlingProxy

    proxy = ThrottlingProxy(PREFECT_API_URL.value().removesuffix("/api"))
    settings = {PREFECT_API_URL: f"{proxy.url}/api", PREFECT_CLIENT_MAX_RETRIES: 1}
    with proxy, temporary_settings(settings):
        yield proxy


def test_prefect_failing_to_create_the_fleet_run_starts_nothing_and_the_re_run_starts_it_once(
    region, prefect_behind_proxy, ledger_path
):
    proxy, fleet = prefect_behind_proxy, members(region, "llama", "mistral")
    refused = proxy.inject("503", "/create_flow_run", times=None)

    failed = confirmed_as("run-1", region["llama"], fleet, return_state=True)

    assert failed.is_failed() and refused.hit >= 1
    assert f"could not group with {REGION}'s fleet ({region['lock']})" in failed.message
    assert fleet_runs(region) == []
    (entry,) = LedgerFile(ledger_path).read("llama")
    assert entry.outcome == "failed" and entry.failures[0].phase == "group"

    proxy.clear()
    dropped = proxy.inject("drop_reply", "/create_flow_run")  # created, its reply lost: the retry gets it
    again = confirmed_as("run-1", region["llama"], fleet, return_state=True)

    assert again.name == "Stood down" and dropped.hit == 1, again.message
    (run,) = fleet_runs(region)
    assert again.result()["fleet_run_id"] == str(run.id)
    assert run.parameters["runbooks"] == [region["llama"]]  # mistral never confirmed
    wrote = json.loads(b"".join(open_store(region["lock"]).read(group_key(REGION))))
    assert wrote["fleet_run_id"] == str(run.id) and wrote["key"] == run.idempotency_key


def test_deploy_gives_the_failover_every_runbook_and_refuses_two_lock_stores_in_one_region(region):
    import yaml

    from lifeboat_dr.flows.deploy import deployment_plan, fleet_groups, runbook_target
    from lifeboat_dr.kernel.errors import ConfigError

    root = Path(__file__).resolve().parents[2]
    template = yaml.safe_load((root / "prefect.yaml").read_text())
    targets = [runbook_target(region[n], root) for n in ("llama", "mistral", "west")]
    plan = deployment_plan(template, targets, root)
    (entry,) = [d for d in plan["deployments"] if d["name"] == "failover"]
    assert entry["parameters"][
        "fleet"
    ] == [  # those that group, as deploy read them: no failover loads them all
        {"name": n, "path": region[n], "region": r, "lock_store": region["lock"]}
        for n, r in (("llama", REGION), ("mistral", REGION), ("west", "aws-us-west-2"))
    ]

    assert fleet_groups(targets) == [  # what `lifeboat deploy` prints
        f"fleet aws-us-east-1: llama, mistral group their outages in {region['lock']}",
        "fleet aws-us-west-2: west alone groups there, so it fails over alone",
    ]
    with pytest.raises(ConfigError, match=r"llama and stray both fail over from aws-us-east-1 but group in"):
        deployment_plan(template, [*targets, runbook_target(region["stray"], root)], root)


def test_prefect_hanging_on_the_fleet_run_costs_two_bounded_attempts_and_its_late_write_is_the_run(
    region, prefect_behind_proxy, ledger_path, monkeypatch
):
    from lifeboat_dr.providers.orchestrator import prefect_api

    monkeypatch.setattr(prefect_api, "FLEET_CALL_S", 1.0)
    proxy, fleet = prefect_behind_proxy, members(region, "llama", "mistral")
    held = proxy.inject("delay", "/create_flow_run", times=None, seconds=4.0)  # answered after we gave up

    failed = confirmed_as("run-2", region["llama"], fleet, return_state=True)

    assert failed.is_failed() and held.hit == 2, failed.message  # two 1 s attempts, not one 4 s wait
    proxy.clear()
    (late,) = wait_until(lambda: fleet_runs(region), timeout=30)  # both late writes landed: one run, by key
    again = confirmed_as("run-2", region["llama"], fleet, return_state=True)

    assert again.name == "Stood down" and again.result()["fleet_run_id"] == str(late.id), again.message
    assert len(fleet_runs(region)) == 1


def test_a_runbook_confirmed_while_the_fleet_run_is_under_way_waits_for_its_end_then_groups_afresh(
    region, fleet_deployment, ledger_path, monkeypatch
):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    from lifeboat_dr.flows import grouping

    monkeypatch.setattr(grouping, "LATE_POLL_S", 0.2)
    fleet = members(region, "llama", "mistral")
    first = confirmed(region["llama"], fleet)  # alone in its window: a fleet run of one
    (under_way,) = fleet_runs(region)

    late = in_thread(confirmed, region["mistral"], fleet)
    wait_until(lambda: any("waited for" in e.notes for e in LedgerFile(ledger_path).read("mistral")))
    assert late.is_alive() and len(fleet_runs(region)) == 1  # it waits; nothing started meanwhile
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(under_way.id, Cancelled(), force=True)  # the first fleet run ends
    late.join(120)
    state = late.out["value"]

    assert first.name == state.name == "Stood down", state.message
    second = [r for r in fleet_runs(region) if r.id != under_way.id]
    assert [r.parameters["runbooks"] for r in second] == [[region["mistral"]]]
    assert state.result()["fleet_run_id"] == str(second[0].id)
    (entry,) = LedgerFile(ledger_path).read("mistral")
    assert entry.notes["waited for"] == str(under_way.id) and entry.notes["fleet run"] == str(second[0].id)
