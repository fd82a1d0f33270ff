"""The Compute contract: what every compute backend promises the failover.

A backend's test class inherits `ComputeContract` and provides the `compute` fixture (and
tears down what it launched); `local_option`, `echo_job` come from tests/compute/conftest.py.
"""

from __future__ import annotations

import pytest

from lifeboat.errors import NotFound
from providers.compute.base import ClusterState, JobSpec, JobState, wait_for


def _finished(compute, name):
    return wait_for(compute, name, lambda s: s.job.finished, timeout=20)


class ComputeContract:
    def test_launch_runs_the_job_and_its_output_reaches_the_logs(self, compute, local_option, echo_job):
        st = compute.launch("rb-failover", local_option, echo_job)
        assert st.name == "rb-failover" and st.option.infra == "local"
        done = _finished(compute, "rb-failover")
        assert done.job is JobState.SUCCEEDED and done.returncode == 0
        assert "lifeboat-contract-ok" in compute.logs("rb-failover")

    def test_launch_is_idempotent_by_cluster_name(self, compute, local_option, tmp_path):
        job = JobSpec(name="rb", command="sleep 30", workdir=tmp_path)
        first = compute.launch("rb-failover", local_option, job)
        again = compute.launch("rb-failover", local_option, job)
        assert again.launched_at == first.launched_at and again.detail == first.detail
        assert compute.clusters() == ["rb-failover"]

    def test_checkpoint_reaches_the_job_by_env_var(self, compute, local_option, tmp_path):
        job = JobSpec(
            name="rb",
            command="echo resume=$RESUME_FROM",
            workdir=tmp_path,
            resume_env="RESUME_FROM",
            checkpoint="file:///ckpt/step-00000040",
        )
        compute.launch("rb-env", local_option, job)
        _finished(compute, "rb-env")
        assert "file:///ckpt/step-00000040" in compute.logs("rb-env")

    def test_checkpoint_reaches_the_job_by_argument_template(self, compute, local_option, tmp_path):
        job = JobSpec(
            name="rb",
            command="echo",
            workdir=tmp_path,
            resume_arg="--resume {checkpoint}",
            checkpoint="s3://bucket/ckpt/step 40",
        )
        compute.launch("rb-arg", local_option, job)
        _finished(compute, "rb-arg")
        assert "--resume" in compute.logs("rb-arg") and "s3://bucket/ckpt/step 40" in compute.logs("rb-arg")

    def test_a_failing_job_reports_its_exit_code(self, compute, local_option, tmp_path):
        if hasattr(compute, "exit_code"):
            compute.exit_code = 3  # the fake's script for "the command exits 3"
        compute.launch("rb-fails", local_option, JobSpec(name="rb", command="exit 3", workdir=tmp_path))
        done = _finished(compute, "rb-fails")
        assert done.job is JobState.FAILED and done.returncode == 3

    def test_teardown_removes_the_cluster_and_missing_ones_are_fine(self, compute, local_option, tmp_path):
        compute.launch("rb-drill", local_option, JobSpec(name="rb", command="sleep 30", workdir=tmp_path))
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

    def test_plan_keeps_runbook_order_and_says_why_an_option_is_out(self, compute, local_option):
        from dataclasses import replace

        blocked_one = replace(local_option, infra="local", rank=0)
        other = replace(local_option, infra="local", rank=1)
        # Blocking "local" leaves nothing; no block keeps both in rank order.
        open_plan = compute.plan([other, blocked_one])
        assert [o.rank for o in open_plan] == [0, 1] and all(o.feasible for o in open_plan)
        shut = compute.plan([blocked_one, other], blocked=["local"])
        assert not any(o.feasible for o in shut) and all("blocked" in o.reason for o in shut)

    def test_every_backend_implements_the_compute_protocol(self, compute):
        from providers.compute import Compute

        assert isinstance(compute, Compute)

    def test_runbook_job_section_becomes_the_job_spec(self, tmp_path):
        from runbooks.model import Runbook

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
                    "command": "python -m lifeboat.trainer --steps 60",
                    "resume": {"arg": "--resume {checkpoint}"},
                },
                "checkpoint": {"cadence": "5s"},
            }
        )
        spec = JobSpec.from_runbook(rb, checkpoint="file:///dr/step-00000040")
        assert spec.resume_suffix() == " --resume file:///dr/step-00000040" and spec.resume_envs() == {}
        assert spec.store_uri.startswith("file:///") and spec.store_uri.endswith("/secondary")
        assert JobSpec.from_runbook(rb).resume_suffix() == ""  # a fresh start passes nothing

    # --- provisioning apart from the job: GPUs held before approval, restarts on the same cluster

    def test_cluster_provisioned_before_approval_runs_nothing_until_run(
        self, compute, local_option, echo_job
    ):
        held = compute.launch("rb-failover", local_option)
        assert held.state is ClusterState.UP and held.job is JobState.IDLE
        assert compute.logs("rb-failover") == "" and compute.clusters() == ["rb-failover"]
        started = compute.run("rb-failover", echo_job)
        assert started.launched_at == held.launched_at  # the same cluster, not a new one
        done = _finished(compute, "rb-failover")
        assert done.job is JobState.SUCCEEDED and "lifeboat-contract-ok" in compute.logs("rb-failover")

    def test_launch_with_the_job_starts_it_on_a_cluster_provisioned_idle(
        self, compute, local_option, echo_job
    ):
        compute.launch("rb-failover", local_option)
        compute.launch("rb-failover", local_option, echo_job)  # a re-run flow that never called run
        assert _finished(compute, "rb-failover").job is JobState.SUCCEEDED
        assert "lifeboat-contract-ok" in compute.logs("rb-failover")
        assert compute.clusters() == ["rb-failover"]

    def test_run_restarts_a_running_job_from_another_checkpoint(self, compute, local_option, tmp_path):
        job = JobSpec(
            name="rb", command="echo from=$RESUME_FROM; sleep 30", workdir=tmp_path, resume_env="RESUME_FROM"
        )
        scripted = hasattr(compute, "job_seconds")  # the fake's script for "runs until stopped"
        if scripted:
            compute.job_seconds = None
        first = compute.launch("rb-failover", local_option, job.resuming_from("ckpt/step-30"))
        assert first.job is JobState.RUNNING
        if scripted:
            compute.job_seconds = 0.0
        rollback = JobSpec(
            name="rb", command="echo from=$RESUME_FROM", workdir=tmp_path, resume_env="RESUME_FROM"
        )
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

    def test_teardown_of_a_cluster_that_never_ran_a_job(self, compute, local_option):
        compute.launch("rb-held", local_option)
        compute.teardown("rb-held")
        assert compute.clusters() == []
        with pytest.raises(NotFound):
            compute.status("rb-held")
