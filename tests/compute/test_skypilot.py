"""SkyPilot's real optimizer over the shipped catalog, and the task Lifeboat hands to SkyPilot.

No network and no real launch: planning runs in process over providers/compute/catalog/v8,
and launching goes through `FakeSkyLauncher`, which records each task, runs its setup and
run locally and raises SkyPilot's own exceptions. What every backend promises is in the
compute contract (tests/compute/test_contract.py); these are SkyPilot's own seams.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.compute.base import (
    CapacityError,
    ClusterState,
    JobSpec,
    JobState,
    PlanOption,
    wait_for,
)
from lifeboat_dr.providers.compute.fallback import launch_with_fallback
from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute, build_task
from lifeboat_dr.providers.compute.skyplan import SHIPPED_CATALOG


def _opt(rank: int, infra: str, acc: str | None = "H100:8", spot: bool = False) -> PlanOption:
    return PlanOption(
        infra=infra, instance_type=None, accelerators=acc, use_spot=spot, hourly_usd=None, rank=rank
    )


def _catalog_rows(cloud: str) -> list[dict[str, str]]:
    with open(SHIPPED_CATALOG / cloud / "vms.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def sky_compute():
    return SkyPilotCompute(offline=True)


def test_failed_primary_region_is_blocked_and_the_optimizer_prices_the_rest(sky_compute):
    plan = sky_compute.plan(
        [_opt(0, "aws/us-east-1"), _opt(1, "aws"), _opt(2, "gcp/us-central1", spot=True)],
        blocked=["aws/us-east-1"],
    )
    by_rank = {o.rank: o for o in plan}
    assert not by_rank[0].feasible and "blocked" in by_rank[0].reason
    # A whole-cloud candidate: SkyPilot picks the cheapest region that is not blocked.
    aws = by_rank[1]
    assert aws.feasible and aws.infra.startswith("aws/") and aws.infra != "aws/us-east-1"
    p5 = [
        r for r in _catalog_rows("aws") if r["InstanceType"] == "p5.48xlarge" and r["Region"] != "us-east-1"
    ]
    assert aws.instance_type == "p5.48xlarge" and aws.hourly_usd == pytest.approx(
        min(float(r["Price"]) for r in p5)
    )
    # GCP prices the accelerators on top of the host VM; spot uses the spot columns.
    gcp_rows = [r for r in _catalog_rows("gcp") if r["Region"] == "us-central1"]
    host = next(r for r in gcp_rows if r["InstanceType"] == "a3-highgpu-8g")
    gpus = next(r for r in gcp_rows if r["InstanceType"] == "" and r["AcceleratorName"] == "H100")
    gcp = by_rank[2]
    assert gcp.instance_type == "a3-highgpu-8g" and gcp.use_spot
    assert gcp.hourly_usd == pytest.approx(float(host["SpotPrice"]) + float(gpus["SpotPrice"]), abs=1e-3)
    assert [o.rank for o in plan] == [1, 2, 0]  # feasible first, in runbook order


def test_blocking_a_whole_cloud_leaves_only_the_other_cloud(sky_compute):
    plan = sky_compute.plan([_opt(0, "aws"), _opt(1, "gcp")], blocked=["aws"])
    assert [(o.infra.split("/")[0], o.feasible) for o in plan] == [("gcp", True), ("aws", False)]


def test_optimizer_never_picks_a_blocked_region_inside_an_open_cloud(sky_compute):
    plan = sky_compute.plan([_opt(0, "aws", acc="A100:8")], blocked=["aws/us-east-1"])
    assert plan[0].feasible and plan[0].infra == "aws/us-west-2" and plan[0].instance_type == "p4d.24xlarge"
    only_east = sky_compute.plan([_opt(0, "aws", acc="A100-80GB:8")], blocked=["aws/us-east-1"])
    assert not only_east[0].feasible and "ResourcesUnavailableError" in only_east[0].reason


def test_candidate_missing_from_the_catalog_says_so(sky_compute):
    plan = sky_compute.plan([_opt(0, "gcp/europe-west4", acc="A100:8")])
    assert not plan[0].feasible and "does not contain" in plan[0].reason


TASK_YAML = """\
name: llm-pretrain
workdir: ./src
resources:
  accelerators: A100:8
  disk_size: 512
  ports: 8080
envs:
  WANDB_PROJECT: llm
setup: pip install -r requirements.txt
run: torchrun --nproc-per-node 8 train.py
"""


@pytest.fixture
def task_yaml(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    path = tmp_path / "task.yaml"
    path.write_text(TASK_YAML)
    return path


def test_task_gets_the_candidate_resources_the_checkpoint_env_and_the_mounted_store(task_yaml):
    job = JobSpec(
        name="llm",
        task_yaml=task_yaml,
        resume_env="RESUME_FROM",
        checkpoint="s3://dr-bucket/ckpt/step-00012000",
        store_uri="s3://dr-bucket/ckpt",
    )
    task = build_task(job, _opt(0, "gcp/us-central1", acc="H100:8", spot=True))
    (res,) = list(task.resources)
    assert (res.infra.cloud.lower(), res.infra.region) == ("gcp", "us-central1")
    assert res.accelerators == {"H100": 8} and res.use_spot and res.disk_size == 512
    assert task.envs == {
        "WANDB_PROJECT": "llm",
        "RESUME_FROM": "s3://dr-bucket/ckpt/step-00012000",
        "LIFEBOAT_CHECKPOINT_DIR": "/lifeboat/checkpoints/ckpt",
    }
    assert task.workdir == str(task_yaml.parent / "src")
    # SkyPilot mounts whole buckets only (a sub-path in MOUNT mode is its StorageModeError):
    # the bucket is mounted and the job told where its prefix lies.
    mount = task.storage_mounts["/lifeboat/checkpoints"]
    assert mount.source == "s3://dr-bucket" and mount.mode.value == "MOUNT"


def test_task_resumes_by_argument_when_the_runbook_says_so(task_yaml):
    job = JobSpec(
        name="llm",
        task_yaml=task_yaml,
        resume_arg="--resume {checkpoint}",
        checkpoint="gs://dr/ckpt/step 12000",
    )
    task = build_task(job, _opt(0, "aws/us-west-2", acc=None))
    assert task.run == "torchrun --nproc-per-node 8 train.py --resume 'gs://dr/ckpt/step 12000'"
    assert list(task.resources)[0].accelerators == {"A100": 8}  # the task's own, kept


def test_managed_mode_sets_job_recovery(task_yaml):
    job = JobSpec(name="llm", task_yaml=task_yaml)
    task = build_task(
        job, _opt(0, "aws", spot=True), job_recovery={"strategy": "FAILOVER", "max_restarts_on_errors": 2}
    )
    assert list(task.resources)[0].job_recovery == {"strategy": "FAILOVER", "max_restarts_on_errors": 2}


def test_missing_task_yaml_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="job.task: no such file"):
        build_task(JobSpec(name="llm", task_yaml=tmp_path / "nope.yaml"), _opt(0, "aws"))


RUN = 'echo "training from ${RESUME_FROM:-scratch}"; sleep 30'
RUNNABLE_TASK = f"""\
name: llm-pretrain
workdir: ./src
resources:
  accelerators: A100:8
setup: echo installing requirements
run: {RUN}
"""


@pytest.fixture
def runnable_task(tmp_path) -> Path:
    """A task whose setup and run this machine can run (the fake launcher runs them)."""
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "runnable.sky.yaml"
    path.write_text(RUNNABLE_TASK)
    return path


def _logged(compute, cluster: str, text: str) -> str:
    wait_for(compute, cluster, lambda _: text in compute.logs(cluster), timeout=20)
    return compute.logs(cluster)


def test_capacity_error_falls_back_to_the_next_candidate_and_nothing_leaks(runnable_task, launcher):
    launcher.no_capacity.add("aws/us-west-2")
    compute = SkyPilotCompute(launcher=launcher, offline=True, task_yaml=runnable_task)
    plan = compute.plan(
        [_opt(0, "aws/us-east-1"), _opt(1, "aws/us-west-2"), _opt(2, "gcp/us-central1")],
        blocked=["aws/us-east-1"],
    )
    job = JobSpec(
        name="llm", task_yaml=runnable_task, checkpoint="s3://b/ckpt/step-10", resume_env="RESUME_FROM"
    )
    result = launch_with_fallback(compute, "llm-failover", plan, job, poll_s=0)
    assert [(a.option.infra, a.ok) for a in result.attempts] == [
        ("aws/us-west-2", False),
        ("gcp/us-central1", True),
    ]
    assert (
        "CapacityError" in result.attempts[0].error
        and "InsufficientInstanceCapacity" in result.attempts[0].error
    )
    assert result.cluster.state is ClusterState.UP and result.cluster.option.hourly_usd is not None
    assert compute.clusters() == ["llm-failover"] and "llm-failover" in launcher.downs  # the half-made one

    again = compute.launch("llm-failover", result.cluster.option, job)  # a re-run flow
    assert again.state is ClusterState.UP and len(launcher.launched) == 2  # no third `sky launch`
    log = _logged(compute, "llm-failover", "training from s3://b/ckpt/step-10")
    assert log.index("installing requirements") < log.index("training")  # setup, then run: one job


def test_sky_capacity_error_maps_to_capacity_error(task_yaml, launcher):
    launcher.no_capacity.add("gcp/us-central1")
    compute = SkyPilotCompute(launcher=launcher, offline=True)
    with pytest.raises(CapacityError):
        compute.launch("x", _opt(0, "gcp/us-central1"), JobSpec(name="x", task_yaml=task_yaml))
    assert compute.clusters() == []


def test_gpus_held_before_approval_get_setup_and_the_store_but_run_nothing(runnable_task, launcher):
    compute = SkyPilotCompute(launcher=launcher, task_yaml=runnable_task, store_uri="s3://dr-bucket/ckpt")
    assert compute.launch("llm-failover", _opt(0, "gcp/us-central1", acc="H100:8")).state is ClusterState.UP
    # SkyPilot runs setup detached, as a job: pending until it is done, then the cluster is idle.
    held = wait_for(compute, "llm-failover", lambda s: s.job is not JobState.PENDING, timeout=20)
    assert held.job is JobState.IDLE and compute.logs("llm-failover") == ""
    (_, task) = launcher.launched[-1]
    # sky exec skips setup and file mounts, so provisioning does them; only `run:` waits.
    assert task.run is None and task.setup == "echo installing requirements"
    assert task.storage_mounts["/lifeboat/checkpoints"].source == "s3://dr-bucket"
    (res,) = list(task.resources)
    assert res.infra.region == "us-central1" and res.accelerators == {"H100": 8}
    assert (
        "RESUME_FROM" not in task.envs
        and task.envs["LIFEBOAT_CHECKPOINT_DIR"] == "/lifeboat/checkpoints/ckpt"
    )

    job = JobSpec(
        name="llm", task_yaml=runnable_task, resume_env="RESUME_FROM", store_uri="s3://dr-bucket/ckpt"
    )
    started = compute.run("llm-failover", job.resuming_from("s3://dr-bucket/ckpt/step-40"))
    assert started.job is JobState.RUNNING and launcher.cancels == []  # the setup job is left alone
    (_, ran) = launcher.execs[-1]
    assert ran.run == RUN and ran.setup is None and not ran.storage_mounts
    assert ran.envs["RESUME_FROM"] == "s3://dr-bucket/ckpt/step-40"
    assert list(ran.resources)[0].accelerators == {"H100": 8}  # the cluster's, not the task's A100

    compute.run("llm-failover", job.resuming_from("s3://dr-bucket/ckpt/step-30"))  # a rollback
    assert launcher.cancels == [("llm-failover", 2)]  # the running job stops first
    log = _logged(compute, "llm-failover", "training from s3://dr-bucket/ckpt/step-30")
    assert "installing" not in log and len(launcher.launched) == 1  # exec: no setup, no new cluster


def test_resources_only_cluster_when_there_is_no_task_yaml(launcher):
    compute = SkyPilotCompute(launcher=launcher)
    assert compute.launch("bare", _opt(0, "aws/us-west-2", acc="H100:8")).job is JobState.IDLE
    (_, task) = launcher.launched[-1]
    assert task.run is None and task.setup is None and list(task.resources)[0].accelerators == {"H100": 8}


def test_managed_jobs_cannot_be_provisioned_apart_from_their_run(task_yaml, launcher):
    compute = SkyPilotCompute(launcher=launcher, managed=True, task_yaml=task_yaml)
    with pytest.raises(ConfigError, match="managed"):
        compute.launch("llm", _opt(0, "aws/us-west-2"))
    with pytest.raises(ConfigError, match="managed"):
        compute.run("llm", JobSpec(name="llm", task_yaml=task_yaml))


def test_offline_catalog_refuses_a_second_runtime_dir_once_sky_is_imported(sky_compute, tmp_path):
    from lifeboat_dr.providers.compute.skyplan import use_offline_catalog

    with pytest.raises(ConfigError, match="SKY_RUNTIME_DIR"):
        use_offline_catalog(runtime_dir=tmp_path / "elsewhere")
