"""Planning and launching as the user's SkyPilot setup would: which catalog prices the plan
(and that the plan says so), SkyPilot's launch errors mapped to next candidate / retry / stop
with nothing left behind, and managed jobs chosen in the runbook.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lifeboat_dr.kernel.errors import ProviderUnavailable, StopFailover
from lifeboat_dr.providers.compute.base import CapacityError, JobSpec, PlanOption
from lifeboat_dr.providers.compute.fallback import launch_with_fallback
from lifeboat_dr.providers.compute.skycatalog import choose_catalog, enabled_clouds, snapshot_date
from lifeboat_dr.providers.compute.skyerrors import classify, launch_error
from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _offline_sky():
    SkyPilotCompute(offline=True)


def _sky_home(tmp_path: Path, clouds: list[str] | None) -> Path:
    """A SkyPilot home as `sky check` leaves it: state.db's config table, fetched catalogs."""
    home = tmp_path / "home"
    (home / ".sky").mkdir(parents=True)
    if clouds is not None:
        con = sqlite3.connect(home / ".sky" / "state.db")
        con.execute("CREATE TABLE config (key TEXT PRIMARY KEY, value TEXT)")
        con.execute("INSERT INTO config VALUES ('enabled_clouds_default_compute', ?)", (json.dumps(clouds),))
        con.execute("INSERT INTO config VALUES ('enabled_clouds_default_storage', ?)", (json.dumps(["R2"]),))
        con.commit()
        con.close()
        (home / ".sky" / "catalogs" / "v8" / "aws").mkdir(parents=True)
        (home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv").write_text("InstanceType\n")
    return home


def test_live_when_sky_check_enabled_a_cloud_else_the_snapshot(tmp_path):
    live = choose_catalog(None, _sky_home(tmp_path / "a", ["AWS", "GCP"]))
    assert live.kind == "live" and live.clouds == ("aws", "gcp") and live.date  # fetch day of vms.csv
    assert "live catalog (aws, gcp; fetched " in live.describe()
    none = choose_catalog(None, _sky_home(tmp_path / "b", None))
    assert none.kind == "snapshot" and none.date == snapshot_date() != ""
    assert none.describe().startswith(f"snapshot catalog of {snapshot_date()}")
    forced = choose_catalog("snapshot", _sky_home(tmp_path / "c", ["AWS"]))
    assert forced.kind == "snapshot"
    assert enabled_clouds(tmp_path / "nowhere") == ()


def test_a_corrupt_sky_state_reads_as_no_enabled_cloud(tmp_path):
    home = tmp_path / "h"
    (home / ".sky").mkdir(parents=True)
    (home / ".sky" / "state.db").write_bytes(b"not a database")
    assert enabled_clouds(home) == () and choose_catalog(None, home).kind == "snapshot"


@pytest.mark.processes
def test_plan_prints_the_price_source_and_date_and_remembers_the_answer(tmp_path):
    env = {
        "PYTHONPATH": str(REPO),
        "LIFEBOAT_CACHE_DIR": str(tmp_path / "memo"),
        "LIFEBOAT_SKY_HOME": str(_sky_home(tmp_path, None)),
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
    }

    def plan(*extra):
        return subprocess.run(
            [sys.executable, "-m", "lifeboat_dr", "plan", "runbooks/llama-70b-pretrain.yaml", *extra],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first, second = plan(), plan()
    assert first.returncode == 0, first.stderr
    assert f"snapshot catalog of {snapshot_date()} shipped with Lifeboat (aws, gcp)" in first.stdout
    assert "remembered" not in first.stdout and "remembered" in second.stdout
    assert first.stdout.split("\n", 2)[2] == second.stdout.split("\n", 2)[2]  # same table
    other = plan("--block", "gcp")  # another input: computed, not served from the cache
    assert "remembered" not in other.stdout and "gcp/us-central1 is blocked" not in first.stdout


def _opt(rank: int, infra: str) -> PlanOption:
    return PlanOption(
        infra=infra, instance_type=None, accelerators="H100:8", use_spot=False, hourly_usd=None, rank=rank
    )


def test_skypilot_launch_errors_map_to_next_candidate_retry_or_stop():
    from sky import exceptions as e

    assert classify(e.ResourcesUnavailableError("quota exceeded")) == "next"
    assert classify(e.KubeAPIUnreachableError("k8s down")) == "next"  # a subclass inherits
    assert classify(e.CloudError("InternalError", "boom", "aws")) == "next"
    assert classify(e.ResourcesUnavailableError("cannot be satisfied", no_failover=True)) == "stop"
    assert classify(e.ResourcesMismatchError("bad")) == "stop"
    assert classify(e.StorageModeError("sub-path")) == "stop"
    assert classify(e.ApiServerConnectionError("http://127.0.0.1:46580")) == "retry"
    assert classify(RuntimeError("never seen before")) == "stop"
    assert isinstance(launch_error("aws/us-west-2", e.ResourcesUnavailableError("no H100")), CapacityError)
    err = launch_error("aws/us-west-2", e.ApiServerConnectionError("http://x"))
    assert isinstance(err, ProviderUnavailable) and not isinstance(err, CapacityError)
    assert isinstance(launch_error("aws/us-west-2", e.NotSupportedError("spot")), StopFailover)


@pytest.fixture
def task_yaml(tmp_path) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text("name: t\nresources:\n  accelerators: H100:8\nrun: python train.py\n")
    return path


def test_a_cloud_error_moves_on_and_the_partial_cluster_is_torn_down(task_yaml, launcher):
    from sky import exceptions as e

    launcher.errors["aws/us-west-2"] = e.CloudError("InsufficientInstanceCapacity", "none", "aws")
    compute = SkyPilotCompute(launcher=launcher, offline=True, task_yaml=task_yaml)
    plan = compute.plan([_opt(0, "aws/us-west-2"), _opt(1, "gcp/us-central1")])
    job = JobSpec(name="t", task_yaml=task_yaml)
    result = launch_with_fallback(compute, "t-dr", plan, job, poll_s=0)
    assert [(a.option.infra, a.ok) for a in result.attempts] == [
        ("aws/us-west-2", False),
        ("gcp/us-central1", True),
    ]
    assert "CloudError" in result.attempts[0].error and launcher.downs[0] == "t-dr"
    assert compute.clusters() == ["t-dr"]


def test_a_task_skypilot_refuses_stops_the_fallback_without_trying_the_rest(task_yaml, launcher):
    from sky import exceptions as e

    launcher.errors["aws/us-west-2"] = e.ResourcesMismatchError("disk_tier ultra unsupported")
    compute = SkyPilotCompute(launcher=launcher, offline=True, task_yaml=task_yaml)
    plan = compute.plan([_opt(0, "aws/us-west-2"), _opt(1, "gcp/us-central1")])
    with pytest.raises(StopFailover, match="ResourcesMismatchError: disk_tier ultra unsupported"):
        launch_with_fallback(compute, "t-dr", plan, JobSpec(name="t", task_yaml=task_yaml), poll_s=0)
    assert len(launcher.launched) == 1 and compute.clusters() == []  # one try, nothing left


def test_managed_jobs_are_chosen_in_the_runbook_with_their_recovery_strategy(tmp_path):
    from lifeboat_dr.flows.wiring import compute_for
    from lifeboat_dr.runbooks.loader import load_runbook

    text = (REPO / "runbooks" / "mistral-7b-sft.yaml").read_text()
    assert "managed:" not in text
    path = tmp_path / "rb.yaml"
    (tmp_path / "jobs").mkdir()  # its task beside it: a task file lies in the runbook's repository
    task = tmp_path / "jobs" / "mistral-7b-sft.sky.yaml"
    task.write_text((REPO / "runbooks" / "jobs" / "mistral-7b-sft.sky.yaml").read_text())
    text = text.replace(
        "job:\n", "job:\n  managed:\n    strategy: EAGER_NEXT_REGION\n    max_restarts_on_errors: 1\n", 1
    )
    text = text.replace("task: jobs/mistral-7b-sft.sky.yaml", f"task: {task}")
    path.write_text(text)
    compute = compute_for(load_runbook(path), live=False)
    assert compute.managed and compute.job_recovery == {
        "strategy": "EAGER_NEXT_REGION",
        "max_restarts_on_errors": 1,
    }
    plain = compute_for(load_runbook(REPO / "runbooks" / "mistral-7b-sft.yaml"), live=False)
    assert not plain.managed and plain.job_recovery is None
    path.write_text(text.replace("EAGER_NEXT_REGION", "EAGER"))
    with pytest.raises(Exception, match=r"job.managed.strategy"):
        load_runbook(path)


def test_the_card_and_ledger_line_of_a_priced_option_names_its_catalog():
    priced = PlanOption(
        "gcp/us-central1",
        "a3-highgpu-8g",
        "H100:8",
        False,
        88.25,
        price_source="snapshot catalog of 2026-11-30",
    )
    assert (
        priced.describe()
        == "gcp/us-central1 a3-highgpu-8g H100:8 on-demand $88.25/h (snapshot catalog of 2026-11-30)"
    )
    assert (
        PlanOption("local", None, None, False, None, price_source="x").describe()
        == "local on-demand price n/a"
    )


def test_a_remembered_live_plan_is_served_at_once_and_refreshed_in_the_background(tmp_path, monkeypatch):
    """The policy only: the live optimizer needs the user's clouds, so the plan itself is
    computed by a counter here; the snapshot path is exercised for real above."""
    import subprocess as sp

    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.shell.commands import plan as plan_cmd

    monkeypatch.setenv("LIFEBOAT_CACHE_DIR", str(tmp_path / "memo"))
    monkeypatch.setenv("LIFEBOAT_SKY_HOME", str(_sky_home(tmp_path, ["AWS", "GCP"])))
    computed, spawned = [], []
    monkeypatch.setattr(
        plan_cmd,
        "_compute_plan",
        lambda rb, blocked, kind: computed.append(kind) or {"computed_at": 0.0, "options": []},
    )
    monkeypatch.setattr(
        sp, "Popen", lambda argv, **kw: spawned.append((argv, kw["env"].get("LIFEBOAT_MEMO_REFRESH")))
    )
    rb = load_runbook(REPO / "runbooks" / "llama-70b-pretrain.yaml")

    first = plan_cmd.build_plan(rb, [])
    assert computed == ["live"] and not first["cached"] and not first["refreshing"] and spawned == []
    stale = plan_cmd.build_plan(rb, ["gcp/us-east4"])  # another input: computed again
    assert computed == ["live", "live"] and not stale["cached"]
    again = plan_cmd.build_plan(rb, [])  # remembered, computed long ago: served, refreshed
    assert again["cached"] and again["refreshing"] and computed == ["live", "live"]
    ((argv, flag),) = spawned
    assert argv[argv.index("--catalog") + 1] == "live" and str(rb.path) in argv and flag == "1"

    monkeypatch.setenv("LIFEBOAT_MEMO_REFRESH", "1")  # what the background process does
    plan_cmd.build_plan(rb, [])
    assert computed == ["live", "live", "live"]
