"""The realtime-serving failover over fakes: verify the standby, switch, watch, revert."""

from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.serving.failover import ServingSettings, serving_failover
from lifeboat_dr.core.serving.watch import Thresholds
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.serving.fake import FakeEndpoint
from lifeboat_dr.providers.traffic.fake import FakeTraffic

DIGEST = "sha256:" + "ab" * 32
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    """Monotonic seconds that move only when the code sleeps."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def settings(**kw) -> ServingSettings:
    base = dict(
        standby_site="standby",
        budget_s=0.5,
        hold_s=2.0,
        watch_s=5.0,
        interval_s=0.1,
        thresholds=Thresholds(window=10, max_error_rate=0.1, max_p99_s=0.3),
    )
    return ServingSettings(**{**base, **kw})


def run(s=None, *, standby=None, router=None, digest=DIGEST, approve=None, ledger=None, **kw):
    router = router or FakeTraffic({"primary": 255, "standby": 0})
    standby = standby or FakeEndpoint("http://standby", digest=DIGEST)
    ledger = ledger or RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), table="serving"
    )
    clock = Clock()
    expected = digest if callable(digest) else (lambda: digest)
    entry = serving_failover(
        s or settings(),
        router=router,
        standby=standby,
        expected_digest=expected,
        ledger=ledger,
        outage_started_at=T0,
        detected_at=T0,
        approve=approve,
        clock=clock,
        sleep=clock.sleep,
        **kw,
    )
    return entry, router, standby


def test_a_verified_standby_takes_all_traffic_and_holds():
    entry, router, _ = run()
    assert entry.outcome == "completed"
    assert router.weights() == {"primary": 0, "standby": 255}
    assert list(entry.phases) == [
        "outage_start",
        "detected",
        "confirmed",
        "standby_verified",
        "traffic_switched",
        "watch_passed",
    ]
    assert entry.notes["weights_digest"] == DIGEST and entry.rto is not None


def test_switch_by_steps_moves_traffic_in_the_runbooks_steps():
    entry, router, _ = run(settings(steps=(10, 50, 100)))
    assert entry.outcome == "completed"
    assert [h["standby"] for h in router.history] == [25, 127, 255]
    assert entry.notes["switch"] == "10% → 50% → 100%"


@pytest.mark.parametrize(
    "break_it, why",
    [
        (lambda e: setattr(e, "digest", "sha256:" + "cd" * 32), "model version: standby serves"),
        (lambda e: setattr(e, "digest", None), "reports no digest"),
        (lambda e: setattr(e, "latency_s", 0.4) or setattr(e, "script", [200, 200, 200]), None),
        (lambda e: setattr(e, "down", True), "health: no answer"),
        (lambda e: setattr(e, "script", [503]), "health: HTTP 503"),
        (lambda e: setattr(e, "script", [200, 200, 500]), "canary: HTTP 500"),
    ],
    ids=["other-weights", "no-digest", "within-budget", "down", "unhealthy", "canary-fails"],
)
def test_a_standby_that_fails_verification_gets_no_traffic(break_it, why):
    standby = FakeEndpoint("http://standby", digest=DIGEST)
    break_it(standby)
    entry, router, _ = run(standby=standby)
    if why is None:  # 400 ms within a 500 ms budget: verified
        assert entry.phases.get("standby_verified")
        return
    assert entry.outcome == "failed" and "standby_verified" not in entry.phases
    assert why in entry.failures[0].error
    assert router.history == [] and router.weights() == {"primary": 255, "standby": 0}


def test_a_canary_over_its_latency_budget_is_refused():
    entry, router, _ = run(settings(budget_s=0.05), standby=FakeEndpoint(digest=DIGEST, latency_s=0.2))
    assert entry.outcome == "failed" and "no answer (TimeoutError" in entry.failures[0].error
    assert router.history == []


def test_no_certified_weights_means_no_switch():
    def none_certified():
        raise LookupError("no certified checkpoint on gs://dr/chat")

    entry, router, _ = run(digest=none_certified)
    assert entry.outcome == "failed" and "no certified checkpoint" in entry.failures[0].error
    assert router.history == []


def test_errors_after_the_switch_revert_the_traffic():
    standby = FakeEndpoint(digest=DIGEST)
    standby.script = [200, 200, 200] + [200, 500, 500]  # verification passes, then it breaks
    entry, router, _ = run(standby=standby)
    assert entry.outcome == "reverted"
    assert router.weights() == {"primary": 255, "standby": 0}
    assert router.history[-1] == {"primary": 255, "standby": 0}
    assert "error rate 2/3 requests" in entry.notes["reverted"]
    assert "traffic_switched" in entry.phases and "watch_passed" not in entry.phases


def test_a_breach_while_the_router_sees_the_primary_down_holds_on_the_standby_and_pages():
    router = FakeTraffic({"primary": 255, "standby": 0})
    router.down("primary")  # the outage this failover is for: it is still going on
    standby = FakeEndpoint(digest=DIGEST)
    standby.script = [200, 200, 200] + [200, 500, 500]
    pages = []

    entry, router, _ = run(standby=standby, router=router, page=pages.append)

    assert entry.outcome == "held"
    assert router.weights() == {"primary": 0, "standby": 255}  # never back to the dead primary
    assert "primary is down by the router's check (fake check)" in entry.notes["held"]
    assert "error rate 2/3 requests" in entry.notes["held"] and "reverted" not in entry.notes
    (page,) = pages
    assert "held" in page and "primary is down" in page and "traffic stays on standby" in page


def test_a_breach_while_the_primary_health_endpoint_does_not_answer_holds():
    primary = FakeEndpoint("http://primary", digest=DIGEST)
    primary.down = True  # the router runs no check that saw it; the primary's own endpoint is dead
    standby = FakeEndpoint(digest=DIGEST)
    standby.script = [200, 200, 200] + [200, 500, 500]
    pages = []

    entry, router, _ = run(standby=standby, sites={"primary": primary}, page=pages.append)

    assert entry.outcome == "held" and router.weights() == {"primary": 0, "standby": 255}
    assert "primary's health endpoint: ConnectionRefusedError" in entry.notes["held"] and len(pages) == 1


def test_a_breach_with_the_primary_healthy_now_reverts_to_it():
    primary = FakeEndpoint("http://primary", digest=DIGEST)  # it answers again: a flap, not an outage
    standby = FakeEndpoint(digest=DIGEST)
    standby.script = [200, 200, 200] + [200, 500, 500]
    pages = []

    entry, router, _ = run(standby=standby, sites={"primary": primary}, page=pages.append)

    assert entry.outcome == "reverted" and router.weights() == {"primary": 255, "standby": 0}
    assert ("GET", "/healthz") in primary.requests and pages == []


def test_a_slow_standby_reverts_on_p99():
    standby = FakeEndpoint(digest=DIGEST, latency_s=0.4)  # inside the 0.5 s budget, over the 0.3 s P99
    entry, router, _ = run(standby=standby)
    assert entry.outcome == "reverted" and "P99 400 ms over 10 requests" in entry.notes["reverted"]
    assert router.weights() == {"primary": 255, "standby": 0}


def test_a_breach_during_a_step_stops_before_the_next_step():
    standby = FakeEndpoint(digest=DIGEST)
    standby.script = [200, 200, 200, 500, 500]
    entry, router, _ = run(settings(steps=(10, 50, 100)), standby=standby)
    assert entry.outcome == "reverted" and "at 10%" in entry.notes["reverted"]
    assert [h["standby"] for h in router.history] == [25, 0]


def test_approvers_saying_no_leave_traffic_where_it_was():
    entry, router, _ = run(approve=lambda ledger: False)
    assert entry.outcome == "aborted" and router.history == []


def test_running_it_twice_leaves_traffic_on_the_standby_once():
    router = FakeTraffic({"primary": 255, "standby": 0})
    run(router=router)
    entry, router, _ = run(router=router)
    assert entry.outcome == "completed" and router.weights() == {"primary": 0, "standby": 255}


def test_a_router_that_still_does_not_answer_after_its_retries_fails_the_switch_and_raises():
    router = FakeTraffic({"primary": 255, "standby": 0})
    router.unavailable = True
    ledger = RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), table="serving"
    )
    with pytest.raises(ProviderUnavailable):
        run(settings(retries=1), router=router, ledger=ledger)
    assert ledger.entry.outcome == "failed" and ledger.entry.failures[0].phase == "traffic_switched"
    assert "standby_verified" in ledger.entry.phases


def test_a_retry_after_a_crash_mid_switch_reverts_to_the_weights_the_first_attempt_found():
    router = FakeTraffic({"primary": 255, "standby": 0})
    standby = FakeEndpoint(digest=DIGEST)  # verification and the hold at 50% pass
    original = router.set_weights
    calls = []

    def flaky(weights):
        calls.append(weights)
        if len(calls) == 2:
            standby.status = 500  # and when the retry has switched again, the standby fails
            raise ProviderUnavailable("router: 503")
        original(weights)

    router.set_weights = flaky
    entry, router, _ = run(settings(steps=(50, 100), retries=1), router=router, standby=standby)
    assert calls[:3] == [{"primary": 127, "standby": 127}, {"primary": 0, "standby": 255}] + calls[:1]
    assert entry.outcome == "reverted" and "at 50%" in entry.notes["reverted"]
    assert router.weights() == {"primary": 255, "standby": 0}  # not the half-done 127/127
    assert entry.notes["weights_before"] == "primary=255, standby=0"


def test_the_walk_goes_through_the_serving_table_each_call_as_one_step():
    from lifeboat_dr.core.failover.walk import ThreadRunner
    from lifeboat_dr.core.serving.steps import SERVING_STEPS

    class Recording(ThreadRunner):
        def __init__(self):
            super().__init__(retries=0, retry_delay_s=0)
            self.started = []

        def start(self, name, call, *args):
            self.started.append(name)
            return super().start(name, call, *args)

    runner = Recording()
    router = FakeTraffic({"primary": 255, "standby": 0})
    ledger = RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), table="serving"
    )
    clock = Clock()
    entry = serving_failover(
        settings(),
        router=router,
        standby=FakeEndpoint(digest=DIGEST),
        expected_digest=lambda: DIGEST,
        ledger=ledger,
        outage_started_at=T0,
        approve=lambda led: True,
        runner=runner,
        clock=clock,
        sleep=clock.sleep,
    )
    assert entry.outcome == "completed"
    assert runner.started == [
        s.name for s in SERVING_STEPS if s.name not in ("detect", "confirm", "approval")
    ]
    assert list(entry.began) == ["standby_verified", "traffic_switched", "watch_passed"]
    assert entry.rto == entry.phases["traffic_switched"] - T0


def test_a_step_past_the_step_timeout_stops_the_walk():
    from lifeboat_dr.kernel.errors import StopFailover

    ledger = RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), table="serving"
    )
    with pytest.raises(StopFailover, match="step watch ran past 0.5s"):
        serving_failover(  # real time: the watch takes 2 s
            settings(watch_s=2.0, step_timeout_s=0.5),
            router=FakeTraffic({"primary": 255, "standby": 0}),
            standby=FakeEndpoint(digest=DIGEST),
            expected_digest=lambda: DIGEST,
            ledger=ledger,
            outage_started_at=T0,
        )
    assert ledger.entry.failures[0].phase == "watch_passed" and "traffic_switched" in ledger.entry.phases
