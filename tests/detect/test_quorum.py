"""The quorum: one signal never fails over, two agreeing do, flapping and recovery are damped."""

from __future__ import annotations

from datetime import timedelta

from lifeboat_dr.core.detection.log import SignalLog
from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Reading, Status

POLICY = QuorumPolicy(
    signals=("gpu_health", "training_progress", "provider", "alertmanager"),
    quorum=2,
    window=timedelta(minutes=5),
)


def reading(signal, status, at, source=None, **kw):
    return Reading(signal, source or f"{signal}-probe", Status(status), at, f"{signal} {status}", **kw)


def test_a_single_failing_signal_is_only_suspected_however_long_it_fails(clock):
    readings, decision = [], None
    for _ in range(30):
        readings.append(reading("provider", "failing", clock()))
        decision = decide(readings, clock(), POLICY, decision)
        assert decision.state is OutageState.suspected
        clock.advance(minutes=1)
    assert decision.voting == ("provider",)


def test_two_signals_failing_within_the_window_confirm_with_their_evidence(clock):
    t0 = clock()
    stall = reading("training_progress", "failing", t0, evidence={"since": "2026-03-01T11:48:00Z"})
    clock.advance(minutes=4)
    provider = reading("provider", "failing", clock())
    decision = decide([stall, provider, reading("gpu_health", "ok", clock())], clock(), POLICY)
    assert decision.state is OutageState.confirmed and decision.changed
    assert decision.voting == ("provider", "training_progress")
    assert sorted(r.signal for r in decision.evidence) == ["provider", "training_progress"]
    assert decision.outage_started_at.isoformat() == "2026-03-01T11:48:00+00:00"
    assert decision.summary == "confirmed: 2 of 2 signal(s) agree (provider, training_progress)"


def test_two_failures_further_apart_than_the_window_do_not_agree(clock):
    stall = reading("training_progress", "failing", clock())
    clock.advance(minutes=6)
    decision = decide([stall, reading("provider", "failing", clock())], clock(), POLICY)
    assert decision.state is OutageState.suspected and decision.voting == ("provider",)


def test_two_sources_of_one_signal_are_one_vote(clock):
    nvml = reading("gpu_health", "failing", clock(), source="nvml@gpu-017")
    dcgm = reading("gpu_health", "failing", clock(), source="alertmanager:a1b2")
    decision = decide([nvml, dcgm], clock(), POLICY)
    assert decision.state is OutageState.suspected and len(decision.evidence) == 2


def test_a_signal_the_runbook_does_not_list_never_votes(clock):
    policy = QuorumPolicy(signals=("provider", "training_progress"), quorum=2)
    decision = decide(
        [reading("provider", "failing", clock()), reading("gpu_health", "failing", clock())], clock(), policy
    )
    assert decision.state is OutageState.suspected
    assert decision.ignored == (("gpu_health", "not one of this runbook's detection signals"),)


def test_a_flapping_signal_never_votes_even_beside_a_real_failure(clock):
    readings = []
    for i in range(6):  # the control plane flips every minute
        readings.append(reading("provider", "failing" if i % 2 == 0 else "ok", clock()))
        clock.advance(minutes=1)
    readings.append(reading("provider", "failing", clock()))
    readings.append(reading("training_progress", "failing", clock()))
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.suspected and decision.voting == ("training_progress",)
    assert decision.ignored == (("provider", "flapping: 6 changes in 15m"),)


def test_a_signal_that_stops_flapping_and_stays_down_votes_again(clock):
    readings = []
    for i in range(6):
        readings.append(reading("provider", "failing" if i % 2 == 0 else "ok", clock()))
        clock.advance(minutes=1)
    for _ in range(16):  # then the region goes down for good
        readings.append(reading("provider", "failing", clock()))
        clock.advance(minutes=1)
    readings.append(reading("training_progress", "failing", clock()))
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.confirmed and decision.ignored == ()


def test_recovery_waits_for_quiet_hysteresis(clock):
    readings = [reading("provider", "failing", clock()), reading("training_progress", "failing", clock())]
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.confirmed
    clock.advance(minutes=1)
    readings.append(reading("provider", "ok", clock()))  # one good ping
    decision = decide(readings, clock(), POLICY, decision)
    assert decision.state is OutageState.confirmed and "holding" in decision.summary
    clock.advance(minutes=1)
    readings.append(reading("training_progress", "ok", clock()))  # everything looks fine ...
    decision = decide(readings, clock(), POLICY, decision)
    assert decision.state is OutageState.confirmed  # ... but not for long enough yet
    clock.advance(minutes=5)
    decision = decide(readings, clock(), POLICY, decision)
    assert decision.state is OutageState.healthy and decision.changed


def test_a_firing_alert_stays_live_until_resolved_beyond_the_window(clock):
    alert = reading(
        "alertmanager", "failing", clock(), source="alertmanager:ff", expires=clock() + timedelta(hours=1)
    )
    clock.advance(minutes=30)
    decision = decide([alert, reading("provider", "failing", clock())], clock(), POLICY)
    assert decision.state is OutageState.confirmed
    resolved = reading("alertmanager", "ok", clock(), source="alertmanager:ff")
    decision = decide([alert, resolved, reading("provider", "failing", clock())], clock(), POLICY)
    assert decision.voting == ("provider",)


def test_unknown_readings_do_not_vote(clock):
    decision = decide(
        [reading("gpu_health", "unknown", clock()), reading("provider", "failing", clock())], clock(), POLICY
    )
    assert decision.voting == ("provider",)


def test_a_decision_round_trips_through_json_with_a_stable_episode_id(clock):
    decision = decide(
        [reading("provider", "failing", clock()), reading("gpu_health", "failing", clock())], clock(), POLICY
    )
    again = OutageDecision.from_dict(decision.to_dict())
    assert again == decision
    assert again.episode_id("guarded") == decision.episode_id("guarded")


def test_the_signal_log_lets_two_observers_share_one_quorum_and_one_transition(tmp_path, clock):
    watch = SignalLog("guarded", tmp_path, clock=clock)
    receiver = SignalLog("guarded", tmp_path, clock=clock)
    first = watch.observe([reading("training_progress", "failing", clock())], POLICY)
    clock.advance(minutes=1)
    second = receiver.observe([reading("alertmanager", "failing", clock(), source="alertmanager:x")], POLICY)
    third = watch.observe([reading("training_progress", "failing", clock())], POLICY)
    assert (first.state, second.state, third.state) == ("suspected", "confirmed", "confirmed")
    assert [d.changed for d in (first, second, third)] == [True, True, False]
    assert watch.latest("training_progress-probe").at == clock()


def test_the_signal_log_forgets_old_readings_but_keeps_each_sources_newest(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    for _ in range(40):
        log.observe([reading("provider", "ok", clock()), reading("gpu_health", "ok", clock())], POLICY)
        clock.advance(minutes=2)
    clock.advance(hours=3)
    log.observe([reading("provider", "ok", clock())], POLICY)
    assert sorted(r.source for r in log.kept(POLICY)) == ["gpu_health-probe", "provider-probe"]


def test_two_signals_from_one_origin_are_one_vote(clock):
    """One Alertmanager group labelling its two alerts with two signals is one source."""
    group = "alertmanager-group:{}:{cluster=a}"
    xid = reading("gpu_health", "failing", clock(), source="alertmanager:a1", origin=group)
    stall = reading("alertmanager", "failing", clock(), source="alertmanager:b2", origin=group)
    decision = decide([xid, stall], clock(), POLICY)
    assert decision.state is OutageState.suspected
    assert (decision.voting, decision.independent, decision.sources) == (
        ("alertmanager", "gpu_health"),
        1,
        (group,),
    )
    assert "from 1 independent source(s); 1 of 2 count" in decision.summary


def test_a_probe_beside_the_group_makes_the_second_independent_vote(clock):
    group = "alertmanager-group:g"
    xid = reading("gpu_health", "failing", clock(), source="alertmanager:a1", origin=group)
    stall = reading("training_progress", "failing", clock(), source="heartbeat")
    decision = decide([xid, stall], clock(), POLICY)
    assert decision.state is OutageState.confirmed and decision.independent == 2


def test_sources_are_matched_so_that_the_most_votes_count(clock):
    """gpu_health and alertmanager are seen only by group G; provider by G and by its probe:
    G can back one vote, the probe another, never three."""
    g = "alertmanager-group:G"
    readings = [
        reading("gpu_health", "failing", clock(), source="am:1", origin=g),
        reading("alertmanager", "failing", clock(), source="am:2", origin=g),
        reading("provider", "failing", clock(), source="am:3", origin=g),
        reading("provider", "failing", clock(), source="control-plane:aws"),
    ]
    policy = QuorumPolicy(signals=POLICY.signals, quorum=3)
    decision = decide(readings, clock(), policy)
    assert decision.independent == 2 and decision.state is OutageState.suspected
    assert decide(readings, clock(), POLICY).state is OutageState.confirmed


def test_a_decision_saved_before_sources_were_counted_still_loads(clock):
    decision = decide(
        [reading("provider", "failing", clock()), reading("gpu_health", "failing", clock())], clock(), POLICY
    )
    old = decision.to_dict()
    del old["independent"], old["sources"]
    assert OutageDecision.from_dict(old).independent == 2
