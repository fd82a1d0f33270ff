"""The Compute contract: what every compute backend promises the failover.

A backend's test class inherits `ComputeContract` and provides the `compute` fixture (and
tears down what it launched). The contract asks for "a job that runs this shell command" and
"a place to launch it"; each backend says how by overriding two fixtures: `make_job(command,
**fields)` returns the `JobSpec` (by default `job.command`; SkyPilot renders a task YAML with
the command as its `run:`), and `option` the `PlanOption` (by default infra `local`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.compute.base import ClusterState, JobSpec, JobState, PlanOption, wait_for

MakeJob = Callable[..., JobSpec]  # make_job(command, **JobSpec fields) -> JobSpec


def _finished(compute, name):
    return wait_for(compute, name, lambda s: s.job.finished, timeout=20)


def _failed_with_3(compute, option, make_job):
    if hasattr(compute, "exit_code"):
        compute.exit_code = 3  # the fake's script for "the command exits 3"
    compute.launch("rb-fails", option, make_job("exit 3"))
    return _finished(compute, "rb-fails")


class ComputeContract:
    @pytest.fixture
    def option(self) -> PlanOption:
        return PlanOption(
            infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0
        )

    @pytest.fixture
    def make_job(self, tmp_path) -> MakeJob:
        def make(command: str, **fields) -> JobSpec:
            return JobSpec(name="rb", command=command, workdir=tmp_path, **fields)

        return make

    @pytest.fixture
    def echo_job(self, make_job) -> JobSpec:
        return make_job("echo lifeboat-contract-ok")

    def test_launch_runs_the_job_and_its_output_reaches_the_logs(self, compute, option, echo_job):
        st = compute.launch("rb-failover", option, echo_job)
        assert st.name == "rb-failover" and st.option.infra == option.infra
        done = _finished(compute, "rb-failover")
        assert done.job is JobState.SUCCEEDED and done.returncode == 0
        assert "lifeboat-contract-ok" in compute.logs("rb-failover")

    def test_launch_is_idempotent_by_cluster_name(self, compute, option, make_job):
        job = make_job("sleep 30")
        first = compute.launch("rb-failover", option, job)
        again = compute.launch("rb-failover", option, job)
        assert again.launched_at == first.launched_at and again.detail == first.detail
        assert compute.clusters() == ["rb-failover"]

    def test_checkpoint_reaches_the_job_by_env_var(self, compute, option, make_job):
        job = make_job(
            "echo resume=$RESUME_FROM", resume_env="RESUME_FROM", checkpoint="file:///ckpt/step-00000040"
        )
        compute.launch("rb-env", option, job)
        _finished(compute, "rb-env")
        assert "file:///ckpt/step-00000040" in compute.logs("rb-env")

    def test_checkpoint_reaches_the_job_by_argument_template(self, compute, option, make_job):
        job = make_job("echo", resume_arg="--resume {checkpoint}", checkpoint="s3://bucket/ckpt/step 40")
        compute.launch("rb-arg", option, job)
        _finished(compute, "rb-arg")
        assert "--resume" in compute.logs("rb-arg") and "s3://bucket/ckpt/step 40" in compute.logs("rb-arg")

    def test_a_failing_job_reads_failed(self, compute, option, make_job):
        assert _failed_with_3(compute, option, make_job).job is JobState.FAILED

    def test_a_failing_job_reports_its_exit_code(self, compute, option, make_job):
        assert _failed_with_3(compute, option, make_job).returncode == 3

    def test_teardown_removes_the_cluster_and_missing_ones_are_fine(self, compute, option, make_job):
        compute.launch("rb-drill", option, make_job("sleep 30"))
        assert compute.status("rb-drill").state is ClusterState.UP
        compute.teardown("rb-drill")
        compute.teardown("rb-drill")
        compute.teardown("never-existed")
        assert compute.clusters() == []
        with pytest.raises(NotFound):
            compute.status("rb-drill")

    def test_unknown_cluster_is_not_found(self, compute):
        with pytest.raises(NotFound):
            compute.status("nope")
        with pytest.raises(NotFound):
            compute.logs("nope")

    def test_plan_keeps_runbook_order_and_says_why_an_option_is_out(self, compute, option):
        first, second = replace(option, rank=0), replace(option, rank=1)
        # Blocking the option's infra leaves nothing; no block keeps both in rank order.
        open_plan = compute.plan([second, first])
        assert [o.rank for o in open_plan] == [0, 1] and all(o.feasible for o in open_plan)
        shut = compute.plan([first, second], blocked=[option.infra])
        assert not any(o.feasible for o in shut) and all("blocked" in o.reason for o in shut)

    def test_every_backend_implements_the_compute_protocol(self, compute):
        from lifeboat_dr.providers.compute import Compute

        assert isinstance(compute, Compute)

    def test_runbook_job_section_becomes_the_job_spec(self, tmp_path):
        from lifeboat_dr.flows.wiring import job_spec
        from lifeboat_dr.runbooks.model import Runbook

        rb = Runbook.model_validate(
            {
                "name": "demo",
                "workload": "finetuning",
                "primary": {"infra": "local", "store": "file://primary"},
                "secondary": {
                    "infra": "local",
                    "store": "file://secondary",
                    "candidates": [{"infra": "local"}],
                },
                "job": {
                    "command": "python -m lifeboat_dr.standins.trainer --steps 60",
                    "resume": {"arg": "--resume {checkpoint}"},
                },
                "checkpoint": {"cadence": "5s"},
            }
        )
        spec = job_spec(rb, checkpoint="file:///dr/step-00000040")
        assert spec.resume_suffix() == " --resume file:///dr/step-00000040" and spec.resume_envs() == {}
        assert spec.store_uri.startswith("file:///") and spec.store_uri.endswith("/secondary")
        assert job_spec(rb).resume_suffix() == ""  # a fresh start passes nothing

    # --- provisioning apart from the job: GPUs held before approval, restarts on the same cluster

    def test_cluster_provisioned_before_approval_runs_nothing_until_run(self, compute, option, echo_job):
        held = compute.launch("rb-failover", option)
        assert held.state is ClusterState.UP and held.job is JobState.IDLE
        assert compute.logs("rb-failover") == "" and compute.clusters() == ["rb-failover"]
        started = compute.run("rb-failover", echo_job)
        assert started.launched_at == held.launched_at  # the same cluster, not a new one
        done = _finished(compute, "rb-failover")
        assert done.job is JobState.SUCCEEDED and "lifeboat-contract-ok" in compute.logs("rb-failover")

    def test_launch_with_the_job_starts_it_on_a_cluster_provisioned_idle(self, compute, option, echo_job):
        compute.launch("rb-failover", option)
        compute.launch("rb-failover", option, echo_job)  # a re-run flow that never called run
        assert _finished(compute, "rb-failover").job is JobState.SUCCEEDED
        assert "lifeboat-contract-ok" in compute.logs("rb-failover")
        assert compute.clusters() == ["rb-failover"]

    def test_run_restarts_a_running_job_from_another_checkpoint(self, compute, option, make_job):
        job = make_job("echo from=$RESUME_FROM; sleep 30", resume_env="RESUME_FROM")
        scripted = hasattr(compute, "job_seconds")  # the fake's script for "runs until stopped"
        if scripted:
            compute.job_seconds = None
        first = compute.launch("rb-failover", option, job.resuming_from("ckpt/step-30"))
        assert first.job is JobState.RUNNING
        if scripted:
            compute.job_seconds = 0.0
        rollback = make_job("echo from=$RESUME_FROM", resume_env="RESUME_FROM")
        again = compute.run("rb-failover", rollback.resuming_from("ckpt/step-20"))
        assert (
            again.launched_at == first.launched_at
            and again.detail != ""
            and compute.clusters() == ["rb-failover"]
        )
        done = _finished(compute, "rb-failover")  # the 30 s sleeper is gone, or this would not finish
        assert done.job is JobState.SUCCEEDED
        log = compute.logs("rb-failover")
        assert "ckpt/step-20" in log and "step-30" not in log  # logs show the job started last
        compute.teardown("rb-failover")
        assert compute.clusters() == []

    def test_run_on_an_unknown_cluster_is_not_found(self, compute, echo_job):
        with pytest.raises(NotFound):
            compute.run("never-launched", echo_job)
        assert compute.clusters() == []

    def test_teardown_of_a_cluster_that_never_ran_a_job(self, compute, option):
        compute.launch("rb-held", option)
        compute.teardown("rb-held")
        assert compute.clusters() == []
        with pytest.raises(NotFound):
            compute.status("rb-held")
