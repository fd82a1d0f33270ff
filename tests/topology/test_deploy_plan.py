"""`lifeboat deploy`'s plan: the runbook path written into every per-runbook deployment."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.flows.deploy import (
    RUNBOOK_PLACEHOLDER,
    SECONDARY_POOL,
    GitSource,
    deployment_names,
    deployment_plan,
    is_per_runbook,
    pools_of,
    runbook_target,
)
from lifeboat_dr.kernel.errors import ConfigError

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
    assert names.count("fleet-failover/fleet-failover") == 1  # by hand: its runbooks come with the run
    # neither keeps its loss log in the primary store (no `loss_log` pass) nor has a recovery ladder (no `recover`)
    assert len(names) == shared + 2 * (per_runbook - 2)
    assert not any(n.startswith(("loss_log/", "recover/")) for n in names)
    assert len(set(names)) == len(names)
    runbooks = {
        d["parameters"]["runbook"] for d in plan["deployments"] if "runbook" in d.get("parameters", {})
    }
    assert runbooks == {"runbooks/demo.yaml", "runbooks/batch-embed.yaml"}
    assert RUNBOOK_PLACEHOLDER not in json.dumps(plan)
    pools = {d["name"]: d["work_pool"]["name"] for d in plan["deployments"]}
    assert {n for n, p in pools.items() if p != "lifeboat"} == {
        "watch-secondary-demo",
        "watch-secondary-batch-embed",
    }
    assert plan["pull"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT.resolve())}}
    ]
    failover = next(d for d in plan["deployments"] if d["name"] == "failover")
    assert (
        failover["triggers"]
        == next(d for d in TEMPLATE["deployments"] if d["name"] == "failover")["triggers"]
    )


def test_a_runbook_with_a_recovery_ladder_gets_a_recover_deployment_started_by_its_own_fault_events(
    tmp_path,
):
    from tests.runbook_yaml import two_site_runbook

    path = tmp_path / "laddered.yaml"
    ladder = {"rungs": [{"rung": "restart"}, {"rung": "failover"}]}
    path.write_text(
        two_site_runbook("laddered", primary={"store": "file://primary", "cluster": "train"}, recovery=ladder)
    )
    targets = [runbook_target(path, ROOT), runbook_target("runbooks/demo.yaml", ROOT)]
    plan = deployment_plan(TEMPLATE, targets, ROOT)
    (recover,) = [d for d in plan["deployments"] if d["entrypoint"].endswith(":recover")]
    assert recover["name"] == "laddered" and recover["parameters"] == {"runbook": str(path.resolve())}
    (trigger,) = recover["triggers"]
    # the runbook comes from the deployment, never from the event: an event picks a deployed one by name
    assert trigger["match"] == {"lifeboat.runbook": "laddered"}
    assert trigger["expect"] == ["lifeboat.training.fault"]
    assert "runbook" not in trigger["parameters"] and "{{ lifeboat." not in json.dumps(plan)


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


def test_each_runbook_is_watched_from_the_control_plane_and_from_a_worker_at_the_secondary():
    """The second vantage: `watch` runs twice per runbook, tagged, on two pools, so a primary
    that one site cannot reach is told from that site's own broken link."""
    plan = deployment_plan(TEMPLATE, [runbook_target("runbooks/demo.yaml", ROOT)], ROOT)
    watches = {
        d["name"]: d for d in plan["deployments"] if d["entrypoint"] == "lifeboat_dr.flows.watch:watch"
    }
    assert set(watches) == {"demo", "watch-secondary-demo"}
    assert watches["demo"]["parameters"] == {"runbook": "runbooks/demo.yaml", "vantage": "control-plane"}
    assert watches["demo"]["work_pool"]["name"] == "lifeboat"
    second = watches["watch-secondary-demo"]
    assert second["parameters"] == {"runbook": "runbooks/demo.yaml", "vantage": "secondary"}
    assert second["work_pool"]["name"] == SECONDARY_POOL == "lifeboat-secondary"
    assert second["schedules"] == watches["demo"]["schedules"]
    assert pools_of(plan) == ["lifeboat", "lifeboat-secondary"]


def test_pools_given_by_name_replace_both_template_pools():
    plan = deployment_plan(
        TEMPLATE, [runbook_target("runbooks/demo.yaml", ROOT)], ROOT, pool="dr", secondary_pool="dr-east"
    )
    assert pools_of(plan) == ["dr", "dr-east"]
    [second] = [d for d in plan["deployments"] if d["name"] == "watch-secondary-demo"]
    assert second["work_pool"]["name"] == "dr-east"


def test_one_pool_for_both_vantages_is_refused():
    """Both watches on the control plane's workers would be one vantage counted twice."""
    with pytest.raises(ConfigError, match="--secondary-pool 'lifeboat'.*must differ from --pool"):
        deployment_plan(
            TEMPLATE, [runbook_target("runbooks/demo.yaml", ROOT)], ROOT, secondary_pool="lifeboat"
        )


def test_with_a_git_source_every_run_clones_the_pinned_commit_and_no_folder_is_named():
    source = GitSource("https://git.example.com/acme/dr.git", "0123456789abcdef0123456789abcdef01234567")
    plan = deployment_plan(TEMPLATE, [runbook_target("runbooks/demo.yaml", ROOT)], ROOT, source=source)
    assert plan["pull"] == [
        {
            "lifeboat_dr.flows.pull.clone_pinned": {
                "repository": "https://git.example.com/acme/dr.git",
                "commit_sha": "0123456789abcdef0123456789abcdef01234567",
            }
        }
    ]
    assert str(ROOT) not in json.dumps(plan)


def _checkout(folder: Path) -> Path:
    """A git checkout holding the demo runbook, committed."""
    folder.mkdir()
    shutil.copy(ROOT / "runbooks/demo.yaml", folder / "demo.yaml")
    for args in (["init", "-q"], ["add", "demo.yaml"], ["commit", "-q", "-m", "runbook"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=folder, check=True
        )
    return folder


def test_a_git_source_refuses_a_runbook_the_workers_clone_would_not_hold(tmp_path, monkeypatch, capsys):
    from lifeboat_dr.shell.cli import main as lifeboat

    monkeypatch.chdir(_checkout(tmp_path / "checkout"))
    Path("demo.yaml").write_text(Path("demo.yaml").read_text().replace("rpo: 30s", "rpo: 40s"))
    assert lifeboat(["deploy", "demo.yaml", "--repository", "file:///srv/git/dr.git"]) == 1
    err = capsys.readouterr().err.strip()
    assert "demo.yaml is not committed as it is here" in err and len(err.splitlines()) == 1

    outside = tmp_path / "elsewhere.yaml"
    shutil.copy(ROOT / "runbooks/demo.yaml", outside)
    assert lifeboat(["deploy", str(outside), "--repository", "file:///srv/git/dr.git"]) == 1
    err = capsys.readouterr().err.strip()
    assert "is outside" in err and "a worker's clone cannot hold it" in err and len(err.splitlines()) == 1


def test_every_deployment_name_is_the_flow_name_prefect_gives_it():
    import importlib

    plan = deployment_plan(TEMPLATE, [runbook_target("runbooks/demo.yaml", ROOT)], ROOT)
    for d, name in zip(plan["deployments"], deployment_names(plan), strict=True):
        module, function = d["entrypoint"].split(":")
        flow = getattr(importlib.import_module(module), function)
        assert name == f"{flow.name}/{d['name']}"
