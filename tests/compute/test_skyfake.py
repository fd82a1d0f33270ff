"""`FakeSkyLauncher` behaves as SkyPilot 0.14.1 does behind the launcher seam: setup once per
provisioning, a job queue per cluster, cancel, preemption, and SkyPilot's own errors. The
adapter's side of the same seam is in test_skypilot.py and the compute contract."""

from __future__ import annotations

import time

import pytest

from lifeboat_dr.kernel.errors import PreconditionFailed, StopFailover
from lifeboat_dr.providers.compute.base import ClusterState, JobSpec, JobState, PlanOption, wait_for
from lifeboat_dr.providers.compute.local import group_alive
from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute


@pytest.fixture(scope="module", autouse=True)
def _offline_sky():
    SkyPilotCompute(offline=True)  # the shipped catalog, before anything imports sky


def _task(**config):
    import sky

    return sky.Task.from_yaml_config({"resources": {"infra": "aws/us-west-2"}, **config})


def _job_status(launcher, cluster: str, *, until: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 20
    while (status := launcher.info(cluster).job_status) not in until and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


def _logged(launcher, cluster: str, job_id: int) -> str:
    deadline = time.monotonic() + 20
    while not (log := launcher.logs(cluster, job_id)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return log


def test_setup_runs_once_per_provisioning_and_run_in_the_synced_workdir(launcher, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "data.txt").write_text("v1")
    task = _task(
        workdir=str(src),
        envs={"MODEL": "llama"},
        secrets={"HF_TOKEN": "s3cr3t"},
        setup="echo setup-ran",
        run="echo run model=$MODEL token=$HF_TOKEN rank=$SKYPILOT_NODE_RANK data=$(cat data.txt)",
    )
    assert launcher.launch(task, "rb-dr") == 1
    assert _job_status(launcher, "rb-dr", until=("SUCCEEDED", "FAILED")) == "SUCCEEDED"
    log = launcher.logs("rb-dr", 1)
    assert log.splitlines() == ["setup-ran", "run model=llama token=s3cr3t rank=0 data=v1"]
    launched_at = launcher.info("rb-dr").launched_at

    (src / "data.txt").write_text("v2")  # sky exec syncs the workdir again, and skips setup
    assert launcher.exec(task, "rb-dr") == 2
    _job_status(launcher, "rb-dr", until=("SUCCEEDED", "FAILED"))
    assert launcher.logs("rb-dr", 2).splitlines() == ["run model=llama token=s3cr3t rank=0 data=v2"]

    # `sky launch` on an UP cluster provisions nothing, so setup is skipped; run is a new job
    assert launcher.launch(task, "rb-dr") == 3 and launcher.info("rb-dr").launched_at == launched_at
    _job_status(launcher, "rb-dr", until=("SUCCEEDED", "FAILED"))
    assert "setup-ran" not in launcher.logs("rb-dr", None) and launcher.clusters() == ["rb-dr"]


def test_jobs_queue_one_at_a_time_and_cancel_stops_the_whole_group(launcher):
    assert launcher.launch(_task(run="echo $$; sleep 30 & sleep 30; wait"), "rb-dr") == 1
    assert launcher.info("rb-dr").job_status == "RUNNING"
    assert launcher.exec(_task(run="echo second"), "rb-dr") == 2
    assert launcher.info("rb-dr").job_status == "PENDING"  # behind job 1, which holds the GPUs
    launcher.cancel("rb-dr", 2)
    assert launcher.info("rb-dr").job_status == "CANCELLED" and launcher.logs("rb-dr", 2) == ""

    pgid = int(_logged(launcher, "rb-dr", 1))  # the job's shell leads its process group
    launcher.cancel("rb-dr", 1)
    launcher.cancel("rb-dr", 1)  # twice: a finished job is left as it is
    assert not group_alive(pgid)  # the background sleep went too
    assert launcher.queue("rb-dr") == [(1, "CANCELLED"), (2, "CANCELLED")]

    assert launcher.exec(_task(run="echo third"), "rb-dr") == 3
    assert _job_status(launcher, "rb-dr", until=("SUCCEEDED",)) == "SUCCEEDED"
    assert launcher.logs("rb-dr", 3) == "third\n" and "not found" in launcher.logs("rb-dr", 9)


def test_setup_and_run_failures_read_as_skypilot_reports_them(launcher):
    launcher.launch(_task(setup="echo pip broke; exit 4", run="echo never"), "rb-setup")
    assert _job_status(launcher, "rb-setup", until=("FAILED_SETUP", "FAILED", "SUCCEEDED")) == "FAILED_SETUP"
    assert launcher.logs("rb-setup", 1) == "pip broke\n"
    launcher.launch(_task(run="exit 3"), "rb-run")
    assert _job_status(launcher, "rb-run", until=("FAILED", "SUCCEEDED")) == "FAILED"


def test_missing_and_stopped_clusters_raise_skypilots_errors(launcher, tmp_path):
    from sky import exceptions

    for call in (
        lambda: launcher.exec(_task(run="true"), "nope"),
        lambda: launcher.cancel("nope", 1),
        lambda: launcher.logs("nope", None),
        lambda: launcher.preempt("nope"),
    ):
        with pytest.raises(exceptions.ClusterDoesNotExist):
            call()
    launcher.down("nope")  # the seam's down: a missing cluster is fine
    assert launcher.info("nope") is None and launcher.clusters() == []

    launcher.launch(_task(run="sleep 30"), "rb-spot")
    launcher.preempt("rb-spot")
    assert launcher.info("rb-spot").status == "STOPPED" and launcher.info("rb-spot").job_status is None
    for call in (
        lambda: launcher.exec(_task(run="true"), "rb-spot"),
        lambda: launcher.cancel("rb-spot", 1),
        lambda: launcher.logs("rb-spot", 1),
    ):
        with pytest.raises(exceptions.ClusterNotUpError, match="STOPPED"):
            call()

    with pytest.raises(exceptions.InvalidClusterNameError):
        launcher.launch(_task(run="true"), "../escape")
    assert launcher.clusters() == ["rb-spot"] and not (tmp_path / "escape").exists()


def test_the_adapter_over_a_preempted_cluster_and_a_hostile_name(launcher, tmp_path):
    option = PlanOption("aws/us-west-2", None, "A100:8", True, None)
    task = tmp_path / "task.sky.yaml"
    task.write_text("setup: echo setup\nrun: sleep 30\n")
    compute = SkyPilotCompute(launcher=launcher, task_yaml=task)
    job = JobSpec(name="rb", task_yaml=task)
    first = compute.launch("rb-dr", option, job)
    launcher.preempt("rb-dr")  # mid-step: the job's group is SIGKILLed
    assert compute.status("rb-dr").state is ClusterState.PREEMPTED
    with pytest.raises(PreconditionFailed):
        compute.run("rb-dr", job)
    with pytest.raises(PreconditionFailed, match="not up"):
        compute.logs("rb-dr")

    again = compute.launch("rb-dr", option, job)  # a STOPPED cluster is launched again, same name
    assert again.state is ClusterState.UP and again.launched_at >= first.launched_at
    assert again.detail == "sky job 2" and launcher.queue("rb-dr")[0] == (1, "FAILED_DRIVER")
    up = wait_for(compute, "rb-dr", lambda s: s.job is JobState.RUNNING, timeout=20)
    assert "setup" in compute.logs("rb-dr") and up.option == option  # provisioned again: setup ran

    with pytest.raises(StopFailover, match="InvalidClusterNameError"):
        compute.launch("-bad name", option, job)
    assert compute.clusters() == ["rb-dr"]


def test_a_git_workdir_is_refused_rather_than_silently_not_synced(launcher):
    from sky import exceptions

    task = _task(workdir={"url": "https://github.com/acme/train.git", "ref": "main"}, run="true")
    with pytest.raises(exceptions.NotSupportedError, match="local workdirs only"):
        launcher.launch(task, "rb-git")
