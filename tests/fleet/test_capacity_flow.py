"""The daily `capacity` flow: `lifeboat deploy` schedules it over every runbook it deploys, and
a quota that falls short fails the run, naming the runbook and the outage."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lifeboat_dr.flows.capacity import capacity
from lifeboat_dr.flows.deploy import RUNBOOKS_PLACEHOLDER, deployment_plan, runbook_target
from tests.fleet.fleet_runbooks import fleet_runbook

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "prefect.yaml").read_text())
USC1 = "gcp/us-central1"


def test_deploy_schedules_one_daily_capacity_check_over_every_runbook_it_deploys():
    targets = [runbook_target("runbooks/demo.yaml", ROOT), runbook_target("runbooks/batch-embed.yaml", ROOT)]
    plan = deployment_plan(TEMPLATE, targets, ROOT)
    checks = [d for d in plan["deployments"] if d["entrypoint"].endswith(":capacity")]
    assert len(checks) == 1
    assert checks[0]["parameters"] == {"runbooks": ["runbooks/demo.yaml", "runbooks/batch-embed.yaml"]}
    assert checks[0]["schedules"] == [{"cron": "0 9 * * *", "timezone": "UTC"}]
    assert checks[0]["work_pool"]["name"] == "lifeboat"
    assert RUNBOOKS_PLACEHOLDER not in str(plan)


def test_a_region_whose_secondary_quota_holds_every_runbook_passes(tmp_path, prefect_server):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 256),))
    b = fleet_runbook(tmp_path, "sft", gpus=64)
    state = capacity(runbooks=[str(a), str(b)], return_state=True)
    assert state.is_completed(), state.message
    outage = state.result()["outages"][0]
    assert (outage["domain"], outage["covers_minimum"], outage["covers_need"]) == (
        "aws/us-east-1",
        True,
        True,
    )


def test_a_quota_too_small_for_the_region_fails_the_run_saying_who_waits(tmp_path, prefect_server):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, price=3.8, quota=((USC1, "H100", 128),))
    b = fleet_runbook(tmp_path, "sft", gpus=128, price=2.0)
    state = capacity(runbooks=[str(a), str(b)], recovery="4h", return_state=True)
    assert state.is_failed()
    # each alone fits in the 128 H100s; together, with the whole region down, sft waits
    assert state.message == "1 capacity check(s) fail: outage of aws/us-east-1: sft would wait for GPUs"


def test_a_runbook_broken_since_deploy_fails_the_run_naming_file_line_and_field(tmp_path, prefect_server):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nworkload: pretraining\n")
    state = capacity(runbooks=[str(broken)], return_state=True)
    assert state.is_failed()
    assert state.message.startswith("capacity: ")
    problems = state.message.removeprefix("capacity: ").splitlines()  # the loader's: one per problem
    assert problems and all(re.match(rf"{re.escape(str(broken))}:\d+: \w+", p) for p in problems), problems
