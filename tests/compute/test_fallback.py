"""Ordered fallback through the candidates on capacity errors, and teardown that always happens."""

from __future__ import annotations

import pytest

from lifeboat_dr.providers.compute.base import ClusterState, JobSpec, PlanOption
from lifeboat_dr.providers.compute.fake import FakeClock, FakeCompute
from lifeboat_dr.providers.compute.fallback import FallbackExhausted, launch_with_fallback, torn_down

JOB = JobSpec(name="llm", command="train.sh", resume_env="RESUME_FROM", checkpoint="s3://b/ckpt/step-40")


def _options(*infras: str) -> list[PlanOption]:
    return [
        PlanOption(
            infra=i, instance_type=None, accelerators="H100:8", use_spot=False, hourly_usd=None, rank=n
        )
        for n, i in enumerate(infras)
    ]


def _fake(**kw) -> FakeCompute:
    clock = FakeClock()
    return FakeCompute(clock=clock, **kw)


def _launch(fake: FakeCompute, options, **kw):
    return launch_with_fallback(
        fake, "llm-failover", options, JOB, clock=fake.clock, sleep=fake.clock.sleep, **kw
    )


def test_capacity_error_in_first_region_falls_back_to_the_next_and_records_both(tmp_path):
    fake = _fake(no_capacity={"aws/us-west-2": -1}, launch_seconds=40)
    result = _launch(fake, _options("aws/us-west-2", "gcp/us-central1"))
    assert result.cluster.option.infra == "gcp/us-central1"
    assert [(a.option.infra, a.ok) for a in result.attempts] == [
        ("aws/us-west-2", False),
        ("gcp/us-central1", True),
    ]
    assert "CapacityError" in result.attempts[0].error and result.attempts[0].seconds == 40
    assert fake.clusters() == ["llm-failover"]


def test_every_region_out_of_capacity_raises_with_all_attempts_and_leaves_nothing(tmp_path):
    fake = _fake(no_capacity={"aws": -1, "gcp": -1})
    with pytest.raises(FallbackExhausted) as err:
        _launch(fake, _options("aws/us-west-2", "aws/us-east-2", "gcp/us-central1"))
    assert [a.option.infra for a in err.value.attempts] == [
        "aws/us-west-2",
        "aws/us-east-2",
        "gcp/us-central1",
    ]
    assert fake.clusters() == []


def test_budget_stops_the_search_before_the_last_candidates(tmp_path):
    fake = _fake(no_capacity={"aws": -1}, launch_seconds=600)
    with pytest.raises(FallbackExhausted) as err:
        _launch(
            fake,
            _options("aws/us-west-2", "aws/us-east-2", "aws/us-east-1", "gcp/us-central1"),
            budget_s=1000,
        )
    assert len(err.value.attempts) == 2  # the third would start after the 1000 s budget
    assert fake.launch_calls == [("llm-failover", "aws/us-west-2"), ("llm-failover", "aws/us-east-2")]


def test_max_attempts_bounds_the_search(tmp_path):
    fake = _fake(no_capacity={"aws": -1})
    with pytest.raises(FallbackExhausted) as err:
        _launch(fake, _options("aws/us-west-2", "aws/us-east-2", "gcp/us-central1"), max_attempts=1)
    assert len(err.value.attempts) == 1


def test_a_boot_slower_than_the_timeout_is_torn_down_and_the_next_region_tried(tmp_path):
    fake = _fake(boot_seconds={"aws/us-west-2": 3600, "gcp": 120})
    result = _launch(fake, _options("aws/us-west-2", "gcp/us-central1"), boot_timeout_s=600, poll_s=30)
    assert result.cluster.state is ClusterState.UP and result.cluster.option.infra == "gcp/us-central1"
    assert "JobTimeout" in result.attempts[0].error
    assert fake.clusters() == ["llm-failover"]


def test_transient_capacity_clears_on_a_later_candidate_of_the_same_cloud(tmp_path):
    fake = _fake(no_capacity={"aws": 1})
    result = _launch(fake, _options("aws/us-west-2", "aws/us-east-2"))
    assert result.cluster.option.infra == "aws/us-east-2"


def test_blocked_and_infeasible_candidates_are_skipped_without_a_launch(tmp_path):
    fake = _fake(prices={"aws": 98.32, "gcp": 88.25})
    plan = fake.plan(_options("aws/us-east-1", "gcp/us-central1"), blocked=["aws/us-east-1"])
    result = _launch(fake, plan)
    assert fake.launch_calls == [("llm-failover", "gcp/us-central1")]
    assert result.cluster.option.hourly_usd == 88.25


def test_preempted_spot_cluster_is_relaunched_by_the_same_idempotent_call(tmp_path):
    fake = _fake()
    first = _launch(fake, _options("gcp/us-central1"))
    fake.preempt("llm-failover")
    assert fake.status("llm-failover").state is ClusterState.PREEMPTED
    again = _launch(fake, _options("gcp/us-central1"))
    assert again.cluster.state is ClusterState.UP and first.cluster.name == again.cluster.name


def test_drill_tears_down_even_when_it_succeeds_and_a_failed_failover_leaves_no_cluster(tmp_path):
    fake = _fake()
    with torn_down(fake, "llm-drill", always=True):
        launch_with_fallback(fake, "llm-drill", _options("gcp/us-central1"), JOB)
        assert fake.clusters() == ["llm-drill"]
    assert fake.clusters() == []

    with pytest.raises(RuntimeError), torn_down(fake, "llm-failover"):
        _launch(fake, _options("gcp/us-central1"))
        raise RuntimeError("loss parity failed and the runbook says stop")
    assert fake.clusters() == []


def test_gpus_acquired_before_approval_start_the_job_only_when_run(tmp_path):
    from lifeboat_dr.kernel.errors import PreconditionFailed
    from lifeboat_dr.providers.compute.base import JobState

    fake = _fake(no_capacity={"aws/us-west-2": -1}, boot_seconds={"gcp": 300}, job_seconds=None)
    result = launch_with_fallback(
        fake,
        "llm-failover",
        _options("aws/us-west-2", "gcp/us-central1"),
        None,
        clock=fake.clock,
        sleep=fake.clock.sleep,
        poll_s=30,
    )
    assert result.cluster.state is ClusterState.UP and result.cluster.job is JobState.IDLE
    assert [a.ok for a in result.attempts] == [False, True] and fake.logs("llm-failover") == ""
    fake.clock.sleep(3600)  # the approver takes an hour: still nothing runs
    assert fake.status("llm-failover").job is JobState.IDLE and fake.run_calls == []

    assert fake.run("llm-failover", JOB).job is JobState.RUNNING
    assert "RESUME_FROM=s3://b/ckpt/step-40" in fake.logs("llm-failover")
    rollback = fake.run("llm-failover", JOB.resuming_from("s3://b/ckpt/step-30"))
    assert rollback.job is JobState.RUNNING and "step-40" not in fake.logs("llm-failover")
    assert fake.run_calls == ["llm-failover", "llm-failover"] and len(fake.launch_calls) == 2

    fake.preempt("llm-failover")
    with pytest.raises(PreconditionFailed):
        fake.run("llm-failover", JOB)  # the spot cluster is gone: relaunch, not run


def test_a_slow_booting_idle_cluster_refuses_run_until_up_but_launch_with_the_job_waits(tmp_path):
    from lifeboat_dr.kernel.errors import PreconditionFailed
    from lifeboat_dr.providers.compute.base import JobState

    fake = _fake(boot_seconds={"gcp": 300}, job_seconds=60)
    (option,) = _options("gcp/us-central1")
    assert fake.launch("llm-failover", option).state is ClusterState.PROVISIONING
    with pytest.raises(PreconditionFailed):
        fake.run("llm-failover", JOB)
    assert fake.launch("llm-failover", option, JOB).job is JobState.PENDING
    fake.clock.sleep(300)
    assert fake.status("llm-failover").job is JobState.RUNNING
    fake.clock.sleep(60)
    assert fake.status("llm-failover").job is JobState.SUCCEEDED
