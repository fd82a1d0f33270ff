"""The live quota where the fleet plans (`fleet.live_quota`): `lifeboat capacity` and the
fleet-failover flow plan on the smaller of the declared quota and AWS Service Quotas' (the real
boto3 adapter against the loopback stub of its API), say so, and plan as declared, saying why,
when it cannot be read; a rehearsal asks no cloud."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fleet.record import FleetLedger
from lifeboat_dr.flows.fleet_failover import fleet_failover
from lifeboat_dr.shell.cli import main
from lifeboat_dr.testing.service_quotas_stub import ServiceQuotasStub
from tests.fleet.fleet_runbooks import fleet_runbook

USW2 = "aws/us-west-2"
POOL = f"{USW2} L-417A185B"


@pytest.fixture
def service_quotas(monkeypatch):
    """The stub, 1,536 vCPUs of P instances in us-west-2 (64 H100 on p5.48xlarge), where boto3 looks."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with ServiceQuotasStub({("us-west-2", "L-417A185B"): 1536}) as stub:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", stub.url)
        yield stub


def runbook(folder, name="pretrain", gpus=96, live=True):
    return fleet_runbook(
        folder, name, gpus=gpus, candidates=((USW2, "H100:8"),), quota=((USW2, "H100", 128),), live_quota=live
    )


def test_capacity_plans_on_the_live_quota_when_it_is_smaller_and_says_so(tmp_path, capsys, service_quotas):
    code = main(["capacity", str(runbook(tmp_path))])
    out = capsys.readouterr().out

    assert code == 1, out
    assert (
        f"live quota: {POOL}: live quota 1536 vCPUs is less than the declared 128 H100 (3072 vCPUs); "
        "planning on 64 H100"
    ) in out
    assert "quota on its candidates 64 (largest aws/us-west-2 H100 64): 50% minimum ok, fits NOT MET" in out


def test_an_unreadable_live_quota_is_planned_as_declared_and_said(tmp_path, capsys, service_quotas):
    service_quotas.denied.add("us-west-2")
    code = main(["capacity", str(runbook(tmp_path))])
    out = capsys.readouterr().out

    assert code == 0, out
    assert (
        f"live quota: {POOL}: live quota unknown (service-quotas us-west-2 ec2/L-417A185B: AccessDenied"
        in out
    )


def test_a_runbook_that_does_not_ask_reads_no_live_quota(tmp_path, capsys, service_quotas):
    assert main(["capacity", str(runbook(tmp_path, live=False))]) == 0
    assert "live quota" not in capsys.readouterr().out and service_quotas.requests == 0


@pytest.mark.integration
def test_the_fleet_failover_plans_on_the_live_quota_and_records_it(
    tmp_path, prefect_server, ledger_path, service_quotas
):
    path = runbook(tmp_path)
    outage = datetime.now(UTC) - timedelta(minutes=5)

    state = fleet_failover(
        runbooks=[str(path)], outage_started_at=outage, approval="reject", return_state=True
    )

    (recorded,) = FleetLedger().read()
    assert [(j.runbook, j.outcome) for j in recorded.jobs] == [("pretrain", "waiting")], state.message
    assert recorded.notes["live quota"].startswith(f"{POOL}: live quota 1536 vCPUs is less than the declared")


@pytest.mark.integration
def test_a_fleet_rehearsal_asks_no_cloud(tmp_path, prefect_server, ledger_path, service_quotas):
    fleet_failover(runbooks=[str(runbook(tmp_path, gpus=64))], dry_run=True, return_state=True)
    assert service_quotas.requests == 0


def test_the_pools_are_asked_at_once_so_a_hanging_service_costs_one_deadline(tmp_path):
    from lifeboat_dr.core.fleet.plan import Place
    from lifeboat_dr.flows.fleet_inputs import live_cap
    from lifeboat_dr.providers.compute.service_quotas import AwsServiceQuotas
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.testing.emulators import HangingServer

    rb = load_runbook(runbook(tmp_path))
    quota = {Place(USW2, "H100"): 128, Place(USW2, "L4"): 64, Place("aws/us-east-1", "H100"): 64}  # 3 pools
    with HangingServer() as hanging:
        cap = live_cap([rb], source=AwsServiceQuotas(hanging.url, deadline_s=1.0))
        began = time.monotonic()
        capped, lines = cap(quota)
        seconds = time.monotonic() - began

    assert capped == quota and len(lines) == 3 and all("live quota unknown" in line for line in lines), lines
    assert seconds < 2.5, f"{seconds:.1f}s: the 3 pools were asked one after another"
