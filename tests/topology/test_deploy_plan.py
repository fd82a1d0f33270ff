"""`lifeboat deploy`'s plan: the runbook path written into every per-runbook deployment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from flows.deploy import (
    RUNBOOK_PLACEHOLDER,
    deployment_names,
    deployment_plan,
    is_per_runbook,
    runbook_target,
)
from lifeboat.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "prefect.yaml").read_text())


def test_the_template_leaves_nothing_to_the_deploying_hosts_environment():
    # `{{ $VAR }}` is filled when deploying, on the deploying host: 9 deployments once got
    # `runbook: ''` that way and `watch` failed every minute.
    assert "{{ $" not in (ROOT / "prefect.yaml").read_text()


def test_each_runbook_gets_its_own_scheduled_deployments_with_its_path_written_in():
    targets = [
        runbook_target(ROOT / "runbooks/demo.yaml", ROOT),
        runbook_target("runbooks/batch-embed.yaml", ROOT),
    ]
    plan = deployment_plan(TEMPLATE, targets, ROOT)
    names = deployment_names(plan)
    assert names.count("failover/failover") == 1
    assert {"watch/demo", "watch/batch-embed", "drill/drill-az-demo", "audit/batch-embed"} <= set(names)
    per_runbook = sum(1 for d in TEMPLATE["deployments"] if is_per_runbook(d))
    shared = len(TEMPLATE["deployments"]) - per_runbook  # failover, failback: the runbook comes with the run
    assert names.count("failback/failback") == 1
    assert len(names) == shared + 2 * per_runbook
    assert len(set(names)) == len(names)
    runbooks = {
        d["parameters"]["runbook"] for d in plan["deployments"] if "runbook" in d.get("parameters", {})
    }
    assert runbooks == {"runbooks/demo.yaml", "runbooks/batch-embed.yaml"}
    assert RUNBOOK_PLACEHOLDER not in json.dumps(plan)
    assert all(d["work_pool"]["name"] == "lifeboat" for d in plan["deployments"])
    assert plan["pull"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT.resolve())}}
    ]
    failover = next(d for d in plan["deployments"] if d["name"] == "failover")
    assert (
        failover["triggers"]
        == next(d for d in TEMPLATE["deployments"] if d["name"] == "failover")["triggers"]
    )


def test_a_runbook_outside_the_project_keeps_its_absolute_path(tmp_path):
    copy = tmp_path / "demo.yaml"
    shutil.copy(ROOT / "runbooks/demo.yaml", copy)
    assert runbook_target(copy, ROOT).path == str(copy.resolve())


def test_the_same_runbook_twice_is_refused_by_name():
    target = runbook_target("runbooks/demo.yaml", ROOT)
    with pytest.raises(ConfigError, match="'demo' given twice"):
        deployment_plan(TEMPLATE, [target, target], ROOT)


def test_no_runbook_is_refused():
    with pytest.raises(ConfigError, match="at least one runbook"):
        deployment_plan(TEMPLATE, [], ROOT)


def test_an_invalid_runbook_is_refused_before_anything_is_deployed(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(ConfigError):
        runbook_target(bad, ROOT)
