"""prefect.yaml's drill and audit deployments point at real flows, with parameters those
flows accept, on the cadences the runbook promises."""

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import yaml
from prefect.flows import load_flow_from_entrypoint
from prefect.server.schemas.schedules import CronSchedule

from lifeboat_dr.flows.deploy import RUNBOOK_PLACEHOLDER
from tests.drills.conftest import ROOT

DEPLOYMENTS = {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}

# name -> (flow, kind, scope, runs per year)
CADENCES = {
    "drill-gpu-fault": ("drill", "gpu-fault", None, 52),
    "drill-node": ("drill", "process-kill", None, 12),
    "drill-az": ("drill", "region-outage", "az", 4),
    "drill-region": ("drill", "region-outage", "region", 2),
    "audit": ("audit", None, None, 12),
}


@pytest.mark.parametrize("name", sorted(CADENCES))
def test_deployment_points_at_a_real_flow_with_valid_parameters(name):
    d = DEPLOYMENTS[name]
    flow_name, kind, scope, _ = CADENCES[name]

    f = load_flow_from_entrypoint(d["entrypoint"])

    assert f.name == flow_name
    params = f.validate_parameters(d["parameters"])
    assert params["runbook"] == RUNBOOK_PLACEHOLDER  # `lifeboat deploy` writes each runbook's path
    if kind:
        assert (params["kind"], params.get("scope")) == (kind, scope)
    assert d["work_pool"]["name"] == "lifeboat"


@pytest.mark.parametrize("name", sorted(CADENCES))
def test_deployment_runs_on_its_cadence(name):
    (schedule,) = DEPLOYMENTS[name]["schedules"]
    cron = CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])  # Prefect's own rules
    tz = ZoneInfo(schedule["timezone"])
    start, end = datetime(2027, 1, 1, tzinfo=tz), datetime(2028, 1, 1, tzinfo=tz)

    runs = asyncio.run(cron.get_dates(n=100, start=start, end=end))

    assert len(runs) == CADENCES[name][3]


def test_the_existing_deployments_are_kept():
    assert {"watch", "failover", "prestage", "certify", "replicate"} <= set(DEPLOYMENTS)


def test_the_drill_form_offers_every_kind():
    from lifeboat_dr.flows.drill import drill
    from lifeboat_dr.flows.drills import ALL_KINDS

    schema = drill.parameters.model_dump()["properties"]["kind"]
    assert set(schema["enum"]) == {*ALL_KINDS, "all"}
