"""The recovery ladder walked through the fake compute and a ledger file: which rung recovers,
what each rung's entry records, twice (one event, one walk), half-done (a walk dead mid-rung)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifeboat_dr.core.guard.ladder import RUNGS, FaultSeen
from lifeboat_dr.core.guard.recovery import ComputeRungs, Ledgers, RungSetting, Walk, ladder_id
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.compute.base import JobSpec, PlanOption
from lifeboat_dr.providers.compute.fake import FakeCompute

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
OPTION = PlanOption("aws/us-east-1/us-east-1a", "p5.48xlarge", "H100:8", False, None)
ZONES = ("aws/us-east-1/us-east-1a", "aws/us-east-1/us-east-1b", "aws/us-east-1/us-east-1c")
CKPT = "s3://prim/ckpt/step-00000040"
JOB = JobSpec(name="job-a", command="train", resume_env="LIFEBOAT_RESUME_FROM")
HANG = FaultSeen("hang", host="node-7", rank=1, step=43, zone="aws/us-east-1/us-east-1a")


class Ticks:
    """The ledger's clock: one second per reading."""

    def __init__(self):
        self.now = T0 + timedelta(seconds=30)

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


class Failover:
    def __init__(self, outcome="completed"):
        self.calls, self.outcome = 0, outcome

    def __call__(self):
        self.calls += 1
        return f"failover-run-{self.calls}", self.outcome


def rungs(*names, **settings):
    out = []
    for n in names:
        extra = {"zones": ZONES} if n == "other-zone" else {}
        out.append(RungSetting(n, rto_target=timedelta(minutes=5), **extra, **settings.get(n, {})))
    return out


@pytest.fixture
def rig(tmp_path):
    fake = FakeCompute(prices={"aws": 98.3}, job_seconds=None)
    fake.launch("job-a", OPTION, JobSpec(name="job-a", command="train"))
    fake.end_job("job-a", 83)  # the guard stopped it: the fault the walks recover from
    sink = LedgerFile(tmp_path / "ledger.jsonl")

    def walk(fault=HANG, ladder=None, **kw):
        kw.setdefault("failover", Failover())
        ticks = Ticks()  # one clock for the ledger and the health check
        return Walk(
            "ev-1",
            fault,
            ladder or rungs("restart", "relaunch-without-node", "other-zone", "failover"),
            ComputeRungs(
                fake,
                "job-a",
                OPTION,
                JOB,
                lambda: (CKPT, 40),
                clock=fake.clock,
                sleep=fake.clock.sleep,
                now=ticks,
            ),
            Ledgers(
                "job-a", sink, rto_target=timedelta(hours=1), rpo_target=timedelta(minutes=30), clock=ticks
            ),
            outage_start=T0,
            detected=T0 + timedelta(seconds=20),
            **kw,
        )

    return fake, sink, walk


def entry(sink, rung=None):
    run_id = ladder_id("ev-1") + (f".{rung}" if rung else "")
    return sink.entry("job-a", run_id)


def test_a_hang_recovers_at_the_restart_on_the_same_cluster_from_the_newest_checkpoint(rig):
    fake, sink, walk = rig
    failover = Failover()
    whole = walk(failover=failover).run()
    assert (whole.outcome, whole.notes["recovered_by"], whole.kind) == ("completed", "restart", "recovery")
    assert fake.run_calls == ["job-a"] and fake.clusters() == ["job-a"] and failover.calls == 0
    assert (
        f"LIFEBOAT_RESUME_FROM={CKPT}" in fake.logs("job-a")
        and entry(sink, "restart").notes["checkpoint"] == CKPT
    )
    restart = entry(sink, "restart")
    assert restart.kind == "restart" and restart.outcome == "completed"
    assert restart.rto == restart.phases["first_step"] - T0 and restart.rto_target == timedelta(minutes=5)
    assert timedelta(seconds=30) < restart.rto < timedelta(minutes=1) and not restart.needs_rca
    assert whole.rto == restart.rto  # the ladder's RTO is the recovering rung's
    assert entry(sink, "relaunch-without-node") is None  # never reached


def test_a_restart_on_a_cluster_that_is_gone_escalates_to_a_relaunch_that_records_the_node(rig):
    fake, sink, walk = rig
    fake.preempt("job-a")  # the node is gone with its cluster: `run` refuses
    whole = walk().run()
    assert whole.notes["recovered_by"] == "relaunch-without-node"
    assert entry(sink, "restart").outcome == "failed"
    relaunch = entry(sink, "relaunch-without-node")
    assert relaunch.notes["failed node"] == "node-7 (rank 1)"
    assert relaunch.notes["cluster"] == "job-a" and fake.clusters() == ["job-a"]  # the runbook's name still
    assert [c for c, _ in fake.launch_calls] == ["job-a", "job-a"] and relaunch.notes[
        "teardown"
    ] == "job-a torn down"
    assert fake.status("job-a").option.infra == OPTION.infra  # same provider and region


def test_a_poisoned_device_never_restarts_in_place(rig):
    fake, sink, walk = rig
    whole = walk(FaultSeen("cuda", poisoned=True, host="node-3", rank=0)).run()
    assert whole.notes["recovered_by"] == "relaunch-without-node" and fake.run_calls == []
    assert whole.notes["plan"] == "relaunch-without-node -> other-zone -> failover"


def test_a_zone_outage_relaunches_in_the_first_other_zone_with_capacity(rig):
    fake, sink, walk = rig
    fake.no_capacity["aws/us-east-1/us-east-1b"] = -1
    whole = walk(FaultSeen("nccl", scope="zone", zone=ZONES[0])).run()
    assert whole.notes["recovered_by"] == "other-zone" and fake.run_calls == []
    assert entry(sink, "other-zone").notes["zone"] == ZONES[2]
    assert [infra for _, infra in fake.launch_calls[1:]] == [ZONES[1], ZONES[2]]  # never the failed zone


def test_a_cluster_the_provider_will_not_tear_down_fails_the_relaunch_and_other_zone_uses_a_new_name(rig):
    fake, sink, walk = rig
    fake.preempt("job-a")

    def refuse(cluster):
        raise ProviderUnavailable(f"{cluster}: the zone's API does not answer (scripted)")

    fake.teardown = refuse
    whole = walk().run()
    assert entry(sink, "relaunch-without-node").outcome == "failed"
    assert "not torn down" in entry(sink, "relaunch-without-node").failures[0].error
    assert (
        whole.notes["recovered_by"] == "other-zone"
        and entry(sink, "other-zone").notes["cluster"] == "job-a-zone"
    )
    assert fake.status("job-a-zone").option.infra == ZONES[1]  # the failed zone (the fault's) skipped


def test_a_region_outage_goes_straight_to_the_failover_flow_and_touches_no_cluster(rig):
    fake, sink, walk = rig
    failover = Failover()
    whole = walk(FaultSeen("hang", scope="region"), failover=failover).run()
    assert failover.calls == 1 and whole.notes["recovered_by"] == "failover"
    assert whole.notes["failover run"] == "failover-run-1: completed"
    assert len(fake.launch_calls) == 1 and fake.run_calls == []  # only the fixture's launch


def test_when_every_rung_fails_the_failover_runs_last_and_its_failure_fails_the_ladder(rig):
    fake, sink, walk = rig
    fake.exit_code, fake.job_seconds = 83, 0.0  # the job hangs again wherever it restarts
    failover = Failover(outcome="failed")
    whole = walk(failover=failover).run()
    assert failover.calls == 1 and whole.outcome == "failed"
    assert [
        whole.notes[f"rung {r}"] for r in ("restart", "relaunch-without-node", "other-zone", "failover")
    ] == ["failed"] * 4
    assert "the job failed again (exit 83)" in entry(sink, "restart").failures[0].error


def test_a_ladder_without_failover_that_cannot_help_fails_at_once_saying_why(rig):
    fake, sink, walk = rig
    whole = walk(FaultSeen("nccl", scope="region"), ladder=rungs("restart")).run()
    assert (
        whole.outcome == "failed"
        and "no rung of the policy can help a region outage" in whole.failures[0].error
    )


def test_a_rung_that_waits_for_a_person_acts_only_when_approved(rig):
    fake, sink, walk = rig
    asked = []
    ladder = rungs("restart", "failover", restart={"approval": "wait"})
    whole = walk(ladder=ladder, approve=lambda rung, what: asked.append((rung, what)) or False).run()
    assert asked == [("restart", "restart after a hang fault (rank 1, node-7)")]
    assert whole.outcome == "rejected" and fake.run_calls == []  # no larger action after a no
    assert entry(sink, "restart").outcome == "rejected"


def test_an_approved_rung_records_the_request_and_the_grant(rig):
    fake, sink, walk = rig
    ladder = rungs("restart", "failover", restart={"approval": "wait"})
    walk(ladder=ladder, approve=lambda rung, what: True).run()
    phases = entry(sink, "restart").phases
    assert phases["approval_requested"] <= phases["approval_granted"] <= phases["provisioned"]


def test_twice_the_same_fault_event_walks_the_ladder_once(rig):
    fake, sink, walk = rig
    first = walk().run()
    again = walk().run()
    assert again == first and fake.run_calls == ["job-a"]


class _Died(BaseException):
    """The walk's process dying (a SIGKILL stops the walk where it is)."""


def test_a_walk_dead_mid_relaunch_reruns_without_repeating_a_rung_or_the_launch(rig):
    fake, sink, walk = rig
    fake.preempt("job-a")
    dying = walk()
    healthy = dying.actions.healthy

    def die_once(cluster, timeout_s):
        dying.actions.healthy = healthy
        raise _Died()

    dying.actions.healthy = die_once
    with pytest.raises(_Died):
        dying.run()
    assert entry(sink).outcome == "in-progress" and entry(sink, "restart").outcome == "failed"
    assert "provisioned" in entry(sink, "relaunch-without-node").phases
    launches = list(fake.launch_calls)
    whole = walk().run()
    assert whole.notes["recovered_by"] == "relaunch-without-node"
    assert fake.launch_calls == launches and fake.run_calls == []  # nothing issued twice


def test_a_walk_dead_after_its_restart_recovered_finishes_without_restarting_again(rig, monkeypatch):
    fake, sink, walk = rig
    append = LedgerFile.append

    def die_after_the_restart(self, e):
        if e.kind == "recovery" and "rung restart" in e.notes:
            raise _Died()
        append(self, e)

    monkeypatch.setattr(LedgerFile, "append", die_after_the_restart)
    with pytest.raises(_Died):
        walk().run()
    monkeypatch.setattr(LedgerFile, "append", append)
    assert entry(sink, "restart").outcome == "completed" and entry(sink).outcome == "in-progress"
    whole = walk().run()
    assert whole.notes["recovered_by"] == "restart" and fake.run_calls == ["job-a"]


def _failed(e):
    return {f.phase: f.error for f in e.failures}


def test_a_fault_event_for_a_job_that_is_running_acts_on_nothing(rig):
    """Forged (whoever reaches Prefect's API), repeated, or stale: the job runs, so no rung
    restarts, tears down or relaunches it, and no larger rung follows."""
    fake, sink, walk = rig
    fake.run("job-a", JOB)  # a live job on the cluster (the fake's jobs run forever here)
    failover = Failover()
    whole = walk(failover=failover).run()
    assert whole.outcome == "stood-down" and "the job is running" in _failed(whole)["first_step"]
    assert fake.run_calls == ["job-a"] and fake.clusters() == ["job-a"] and failover.calls == 0
    assert "forged fault event; nothing done" in _failed(entry(sink, "restart"))["provisioned"]
    assert entry(sink, "relaunch-without-node") is None


def test_a_walk_dead_between_its_restart_and_the_record_does_not_touch_the_restarted_job(rig, monkeypatch):
    """Half-done: the restart was issued, the walk died before writing it down; the re-run
    finds the job running and stands down (a person looks) rather than escalate to a teardown."""
    fake, sink, walk = rig
    run = type(fake).run

    def restart_then_die(self, cluster, job):
        run(self, cluster, job)
        raise _Died()

    monkeypatch.setattr(type(fake), "run", restart_then_die)
    with pytest.raises(_Died):
        walk().run()
    monkeypatch.setattr(type(fake), "run", run)
    whole = walk().run()
    assert whole.outcome == "stood-down" and fake.clusters() == ["job-a"] and fake.run_calls == ["job-a"]


@pytest.mark.parametrize("forged", ["../other-run", "ev/1", "ev.1", "", "x" * 101, "ev 1"])
def test_a_forged_event_id_that_could_name_another_runs_entry_is_refused(rig, forged):
    fake, sink, walk = rig
    w = walk()
    w.event_id = forged
    with pytest.raises(ConfigError, match="event id"):
        w.run()
    assert sink.read() == [] and fake.run_calls == []


class _MemorySink:
    """Ledger entries in memory (a property test makes hundreds of walks)."""

    def __init__(self):
        self.entries = {}

    def append(self, e):
        self.entries[e.run_id] = e.model_copy(deep=True)

    def entry(self, runbook, run_id):
        return self.entries.get(run_id)


class _Scripted:
    """Rung actions that fail where told, counting each action issued."""

    def __init__(self, failing):
        self.failing, self.acted = failing, []

    def act(self, rung, fault):
        self.acted.append(rung.name)
        if rung.name in self.failing:
            raise ProviderUnavailable(f"{rung.name}: scripted")
        return "job-a", {}

    def healthy(self, cluster, timeout_s):
        return T0 + timedelta(seconds=50)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(RUNGS), unique=True),
    st.sets(st.sampled_from(RUNGS)),
    st.sampled_from(["node", "zone", "region"]),
)
def test_property_the_walk_acts_each_rung_at_most_once_and_names_the_first_that_recovered(
    policy, failing, scope
):
    policy = [r for r in policy if r != "failover"] + (["failover"] if "failover" in policy else [])
    sink, actions = _MemorySink(), _Scripted(failing)
    failover = Failover("failed" if "failover" in failing else "completed")
    walk = Walk(
        "ev-p",
        FaultSeen("hang", scope=scope, host="node-7", rank=1),
        rungs(*policy),
        actions,
        Ledgers(
            "job-a", sink, rto_target=timedelta(hours=1), rpo_target=timedelta(minutes=30), clock=Ticks()
        ),
        outage_start=T0,
        detected=T0 + timedelta(seconds=20),
        failover=failover,
    )
    whole = walk.run()
    tried = actions.acted + ["failover"] * failover.calls
    assert len(tried) == len(set(tried))  # no rung twice
    working = [r for r in tried if r not in failing]
    assert whole.notes.get("recovered_by") == (working[0] if working else None)
    if "failover" in policy and not working:
        assert failover.calls == 1  # every earlier rung failed: the failover was not skipped
    assert walk.run() == whole and len(actions.acted) + failover.calls == len(tried)  # twice: once
