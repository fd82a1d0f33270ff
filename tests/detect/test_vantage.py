"""Vantage points: "cannot reach the primary" from one place is unknown; from two, a vote."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from lifeboat_dr.core.detection.probes import CheckpointFreshnessProbe, TrainingProgressProbe
from lifeboat_dr.core.detection.provider import ProviderProbe
from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.core.detection.vantage import VantageProbe, across_vantages, at_vantage
from lifeboat_dr.kernel.errors import LifeboatError, ProviderUnavailable
from lifeboat_dr.providers.health.control_plane import FakeControlPlane

POLICY = QuorumPolicy(signals=("training_progress", "checkpoint_freshness", "provider"), quorum=2)
WINDOW = timedelta(minutes=5)


def timed_out(signal, source, at, vantage, took=2.0):
    r = Reading(
        signal,
        source,
        Status.unknown,
        at,
        "heartbeat unreadable: connect timeout",
        {"unreachable": True, "error": "connect timeout"},
    )
    return at_vantage(r, vantage, took)


def answered(signal, source, at, vantage, status="ok"):
    return at_vantage(Reading(signal, source, Status(status), at, f"{signal} {status}"), vantage, 0.1)


def test_unreachable_from_the_control_plane_alone_stays_unknown_and_says_why(clock):
    hb = timed_out("training_progress", "heartbeat:s3://p/hb", clock(), "control-plane")
    [folded] = across_vantages([hb], clock(), WINDOW)
    assert folded.status is Status.unknown and folded.source == "heartbeat:s3://p/hb"
    assert "control-plane" in folded.summary and "only" in folded.summary and "2 vantage" in folded.summary
    decision = decide([hb], clock(), POLICY)
    assert decision.state is OutageState.healthy and decision.voting == ()


def test_unreachable_from_two_vantages_is_one_vote_naming_each_vantage_and_its_wait(clock):
    readings = [
        timed_out("training_progress", "heartbeat:s3://p/hb", clock(), "control-plane", 2.1),
        timed_out("training_progress", "heartbeat:s3://p/hb", clock(), "secondary", 1.9),
    ]
    [folded] = across_vantages(readings, clock(), WINDOW)
    assert folded.status is Status.failing
    seen = {v["vantage"]: v["took_s"] for v in folded.evidence["vantages"]}
    assert seen == {"control-plane": 2.1, "secondary": 1.9}
    assert "unreachable from 2 vantage points" in folded.summary
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.suspected and decision.voting == ("training_progress",)


def test_three_probes_unreachable_from_two_vantages_confirm(clock):
    readings = [
        timed_out(signal, source, clock(), vantage)
        for signal, source in (("training_progress", "hb"), ("checkpoint_freshness", "s3://p"))
        for vantage in ("control-plane", "secondary")
    ]
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.confirmed
    assert decision.voting == ("checkpoint_freshness", "training_progress") and decision.independent == 2
    assert all(len(r.evidence["vantages"]) == 2 for r in decision.evidence)


def test_an_answer_from_any_vantage_wins_over_the_other_ones_broken_link(clock):
    """The control plane's own link is down: the secondary still reads the primary fine."""
    readings = [
        timed_out("training_progress", "hb", clock(), "control-plane"),
        answered("training_progress", "hb", clock(), "secondary"),
        timed_out("provider", "cp", clock(), "control-plane"),
        answered("provider", "cp", clock(), "secondary"),
    ]
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.healthy
    # ... and a real failing answer (a stale heartbeat) from the vantage that got through votes
    stale = answered("training_progress", "hb", clock(), "secondary", "failing")
    decision = decide([readings[0], stale], clock(), POLICY)
    assert decision.voting == ("training_progress",) and decision.evidence == (stale,)


def test_one_vantage_repeating_itself_is_still_one_vantage(clock):
    """Twice (or forged): many readings from one vantage never make a second vantage."""
    readings = [timed_out("training_progress", "hb", clock(), "control-plane")]
    clock.advance(seconds=30)
    readings.append(timed_out("training_progress", "hb", clock(), "control-plane"))
    [folded] = across_vantages(readings, clock(), WINDOW)
    assert folded.status is Status.unknown and len(folded.evidence["vantages"]) == 1


def test_a_vantage_reading_older_than_the_window_does_not_count(clock):
    old = timed_out("training_progress", "hb", clock(), "secondary")
    clock.advance(minutes=6)
    new = timed_out("training_progress", "hb", clock(), "control-plane")
    [folded] = across_vantages([old, new], clock(), WINDOW)
    assert folded.status is Status.unknown
    assert [v["vantage"] for v in folded.evidence["vantages"]] == ["control-plane"]


def test_untagged_readings_pass_through_unchanged(clock):
    plain = Reading("provider", "cp", Status.failing, clock(), "down")
    assert across_vantages([plain], clock(), WINDOW) == [plain]


class Hangs:
    signal, source = "training_progress", "hb"

    def __init__(self):
        self.release = threading.Event()

    def check(self, previous=None):
        self.release.wait(30)
        raise AssertionError("should have been cut off")


def test_a_vantage_probe_that_hangs_is_cut_off_at_its_bound():
    probe = Hangs()
    started = time.monotonic()
    reading = VantageProbe(probe, "secondary", bound_s=0.3).check()
    took = time.monotonic() - started
    probe.release.set()
    assert took < 2
    assert reading.status is Status.unknown and reading.evidence["unreachable"] is True
    assert reading.source == "hb@secondary" and reading.evidence["vantage"] == "secondary"
    assert "no answer within 0.3 s" in reading.summary


def test_store_errors_mark_readings_unreachable_only_when_the_target_did_not_answer(clock):
    def down():
        raise ProviderUnavailable("s3://p: connect timeout after 2 s")

    assert TrainingProgressProbe(down, timedelta(seconds=30), clock=clock).check().evidence["unreachable"]
    fresh = CheckpointFreshnessProbe(down, timedelta(minutes=5), 2.0, clock=clock).check()
    assert fresh.status is Status.unknown and fresh.evidence["unreachable"] is True

    def refused_content():
        raise LifeboatError("heartbeat is not JSON")

    assert "unreachable" not in TrainingProgressProbe(refused_content, timedelta(seconds=30)).check().evidence
    provider = ProviderProbe(FakeControlPlane(mode="down"), clock=clock).check()
    assert provider.status is Status.failing and provider.evidence["unreachable"] is True
    busy = ProviderProbe(FakeControlPlane(mode="no_capacity"), clock=clock).check()
    assert busy.evidence["unreachable"] is False


class Unreachable:
    def __init__(self, signal, source):
        self.signal, self.source = signal, source

    def check(self, previous=None):
        from lifeboat_dr.core.detection.signals import unreachable, utc_now

        e = ProviderUnavailable(f"{self.source}: connect timeout")
        return Reading(
            self.signal, self.source, Status.unknown, utc_now(), f"unreadable: {e}", unreachable(e)
        )


def test_two_watches_sharing_one_signal_log_fold_by_vantage(tmp_path):
    """The control plane's watch alone stays suspected at most; once the secondary's watch,
    sharing the state, records the same targets unreachable, the outage is confirmed."""
    from lifeboat_dr.core.detection.log import SignalLog

    log = SignalLog("trainer", tmp_path)
    policy = QuorumPolicy(signals=POLICY.signals, quorum=2, window=timedelta(minutes=1))

    def round_from(vantage):
        probes = [Unreachable("training_progress", "hb"), Unreachable("checkpoint_freshness", "s3://p")]
        return [
            VantageProbe(p, vantage, bound_s=2).check(log.latest(f"{p.source}@{vantage}")) for p in probes
        ]

    first = log.observe(round_from("control-plane"), policy)
    assert first.state is OutageState.healthy and first.voting == ()
    again = log.observe(round_from("control-plane"), policy)  # twice from one place: still one vantage
    assert again.state is OutageState.healthy
    both = log.observe(round_from("secondary"), policy)
    assert both.state is OutageState.confirmed and both.changed
    assert {v["vantage"] for r in both.evidence for v in r.evidence["vantages"]} == {
        "control-plane",
        "secondary",
    }


def test_an_answer_flapping_at_one_vantage_is_damped_as_any_signal(clock):
    """The secondary reads the heartbeat stale / fresh / stale ...: flapping, no vote."""
    readings = []
    for i in range(6):
        readings.append(answered("training_progress", "hb", clock(), "secondary", ("failing", "ok")[i % 2]))
        clock.advance(seconds=20)
    readings.append(answered("training_progress", "hb", clock(), "secondary", "failing"))
    decision = decide(readings, clock(), POLICY)
    assert decision.voting == () and decision.ignored[0][1].startswith("flapping")


def test_alert_labels_cannot_claim_a_vantage(clock):
    """Hostile: an alert's labels land under evidence["labels"], never as a vantage tag."""
    alert = Reading(
        "provider", "alertmanager:f1", Status.failing, clock(), "x", {"labels": {"vantage": "secondary"}}
    )
    assert across_vantages([alert], clock(), WINDOW) == [alert]
