"""Unreachable votes count once per target: one store that does not answer is one outage
signal, however many probes read it. Answers that came back still count per signal."""

from __future__ import annotations

from datetime import timedelta

from lifeboat_dr.core.detection.quorum import OutageDecision, OutageState, QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.core.detection.vantage import VantageProbe, across_vantages, at_vantage
from lifeboat_dr.flows.wiring import build_probes
from lifeboat_dr.runbooks.loader import load_runbook
from tests.runbook_yaml import two_site_runbook

POLICY = QuorumPolicy(signals=("training_progress", "checkpoint_freshness", "provider"), quorum=2)
STORE = "10.77.0.1:5000"
API = "10.77.0.1:8080"
VANTAGES = ("control-plane", "secondary")


def timed_out(signal, source, at, vantage, target):
    r = Reading(
        signal,
        source,
        Status.unknown,
        at,
        "unreadable: connect timeout",
        {"unreachable": True, "error": "connect timeout", "target": target},
    )
    return at_vantage(r, vantage, 2.0)


def from_both(signal, source, at, target):
    return [timed_out(signal, source, at, v, target) for v in VANTAGES]


def test_one_unreachable_store_read_by_two_signals_is_one_vote_and_says_so(clock):
    readings = from_both("training_progress", "heartbeat:s3://p/hb", clock(), STORE)
    readings += from_both("checkpoint_freshness", "s3://p/ckpt", clock(), STORE)
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.suspected
    assert decision.voting == ("checkpoint_freshness", "training_progress") and decision.independent == 1
    assert decision.sources == (f"unreachable:{STORE}",)
    for r in decision.evidence:
        other = ({"checkpoint_freshness", "training_progress"} - {r.signal}).pop()
        assert r.evidence["target"] == STORE and r.evidence["shared_with"] == [other]
        assert f"{STORE} also unreachable for {other}: one vote" in r.summary
    assert f"{STORE} (checkpoint_freshness, training_progress)" in decision.summary


def test_a_whole_region_behind_one_store_never_confirms_alone(clock):
    """heartbeat, checkpoint listing and the store-pinging provider probe: three signals, one
    endpoint that stopped answering; the quorum of 2 is not met by it."""
    readings = from_both("training_progress", "heartbeat:s3://p/hb", clock(), STORE)
    readings += from_both("checkpoint_freshness", "s3://p/ckpt", clock(), STORE)
    readings += from_both("provider", "control-plane:s3://p/ckpt", clock(), STORE)
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.suspected and decision.independent == 1
    assert len(decision.voting) == 3


def test_the_store_and_the_provider_api_unreachable_are_two_votes_and_confirm(clock):
    readings = from_both("training_progress", "heartbeat:s3://p/hb", clock(), STORE)
    readings += from_both("checkpoint_freshness", "s3://p/ckpt", clock(), STORE)
    readings += from_both("provider", f"control-plane:http://{API}/healthz", clock(), API)
    decision = decide(readings, clock(), POLICY)
    assert decision.state is OutageState.confirmed and decision.independent == 2
    assert decision.sources == (f"unreachable:{STORE}", f"unreachable:{API}")
    [provider] = [r for r in decision.evidence if r.signal == "provider"]
    assert "shared_with" not in provider.evidence and "also unreachable" not in provider.summary


def test_answers_read_from_one_store_still_count_per_signal(clock):
    """A stale heartbeat and an old checkpoint came back from the same store: two answers,
    each its own vote, as before."""
    stale = [
        at_vantage(
            Reading(signal, source, Status.failing, clock(), "stale", {"target": STORE}), "secondary", 0.1
        )
        for signal, source in (
            ("training_progress", "heartbeat:s3://p/hb"),
            ("checkpoint_freshness", "s3://p"),
        )
    ]
    decision = decide(stale, clock(), POLICY)
    assert decision.state is OutageState.confirmed and decision.independent == 2


def test_one_answer_and_one_unreachable_on_the_same_store_are_two_votes(clock):
    """The heartbeat read stale (an answer) and the listing timed out from both: the answer is
    its own evidence; the timeout is the one unreachable vote of that store."""
    stale = at_vantage(
        Reading(
            "training_progress", "heartbeat:s3://p/hb", Status.failing, clock(), "stale", {"target": STORE}
        ),
        "secondary",
        0.1,
    )
    readings = [stale, *from_both("checkpoint_freshness", "s3://p/ckpt", clock(), STORE)]
    assert decide(readings, clock(), POLICY).independent == 2


def test_repeating_the_same_target_from_more_probes_or_rounds_adds_nothing(clock):
    """Twice (and hostile): more rounds, and more probe names on one target, are still one vote."""
    readings = []
    for i in range(3):
        readings += from_both("training_progress", f"heartbeat-{i}", clock(), STORE)
        readings += from_both("checkpoint_freshness", f"listing-{i}", clock(), STORE)
        clock.advance(seconds=10)
    decision = decide(readings, clock(), POLICY)
    assert decision.independent == 1 and decision.state is OutageState.suspected


def test_the_decision_round_trips_with_its_shared_target(clock):
    """After: the decision as the signal log stores it reads back the same."""
    readings = from_both("training_progress", "hb", clock(), STORE)
    readings += from_both("checkpoint_freshness", "s3://p", clock(), STORE)
    decision = decide(readings, clock(), POLICY)
    again = OutageDecision.from_dict(decision.to_dict())
    assert again == decision
    # held over to the next decision: still one vote, no confirmation
    assert decide(readings, clock(), POLICY, again).state is OutageState.suspected


def test_a_folded_reading_names_its_target(clock):
    [folded] = across_vantages(
        from_both("training_progress", "hb", clock(), STORE), clock(), timedelta(minutes=5)
    )
    assert folded.status is Status.failing and folded.evidence["target"] == STORE
    assert folded.independent_source == f"unreachable:{STORE}"


class Hangs:
    signal, source, target = "checkpoint_freshness", "s3://p/ckpt", STORE

    def check(self, previous=None):
        import time

        time.sleep(5)


def test_a_probe_cut_off_at_its_bound_names_the_target_it_waited_on():
    reading = VantageProbe(Hangs(), "secondary", bound_s=0.2).check()
    assert reading.evidence["unreachable"] is True and reading.evidence["target"] == STORE


def _runbook(tmp_path, **detection_extra):
    path = tmp_path / "rb.yaml"
    path.write_text(
        two_site_runbook(
            "rb",
            primary={
                "infra": "aws/us-east-1",
                "store": "s3://primary/ckpt",
                "endpoint_url": "http://10.77.0.1:5000",
            },
            job="echo resumed",
            detection={
                "signals": ["training_progress", "checkpoint_freshness", "provider"],
                "quorum": 2,
                "window": "5m",
                "heartbeat": "s3://primary/ckpt/heartbeat.json",
                **detection_extra,
            },
        )
    )
    return load_runbook(path)


def test_built_probes_name_their_targets_and_the_store_is_one_target(tmp_path):
    probes = build_probes(_runbook(tmp_path))
    assert [p.signal for p in probes] == ["training_progress", "checkpoint_freshness", "provider"]
    assert {p.target for p in probes} == {STORE}  # the finding: all three read one endpoint


def test_a_provider_endpoint_gives_the_provider_signal_a_target_of_its_own(tmp_path):
    rb = _runbook(tmp_path, provider_endpoint="http://10.77.0.1:8080/healthz")
    heartbeat, checkpoints, provider = build_probes(rb, vantage="secondary")
    assert heartbeat.probe.target == checkpoints.probe.target == STORE
    assert provider.probe.target == API and provider.probe.plane.url == "http://10.77.0.1:8080/healthz"


def test_a_provider_endpoint_that_is_not_a_url_is_refused_naming_the_field(tmp_path):
    import pytest

    from lifeboat_dr.kernel.errors import LifeboatError

    with pytest.raises(LifeboatError, match="provider_endpoint"):
        _runbook(tmp_path, provider_endpoint="not a url")


def test_the_runbooks_targets_are_the_built_probes_targets(tmp_path):
    """`probe_targets` (read from the runbook, for validate) follows `build_probes`."""
    from lifeboat_dr.core.detection.targets import probe_targets

    for rb in (
        _runbook(tmp_path),
        _runbook(tmp_path, provider_endpoint="http://10.77.0.1:8080/healthz"),
    ):
        assert probe_targets(rb.detection, rb.primary, rb.secondary, base_dir=rb.base_dir) == {
            p.signal: p.target for p in build_probes(rb)
        }


def test_validate_warns_when_one_store_is_every_probes_target_and_names_the_fix(tmp_path):
    from lifeboat_dr.core.detection.targets import detection_warnings

    def warnings(rb):
        return detection_warnings(rb.detection, rb.primary, rb.secondary, base_dir=rb.base_dir)

    [warning] = warnings(_runbook(tmp_path))
    assert warning.startswith("detection: checkpoint_freshness, provider, training_progress all reach")
    assert STORE in warning and "quorum of 2" in warning and "detection.provider_endpoint" in warning
    assert warnings(_runbook(tmp_path, provider_endpoint="http://10.77.0.1:8080/healthz")) == []


def test_validate_prints_the_detection_warning_and_still_exits_0(tmp_path, capsys):
    from lifeboat_dr.shell.cli import main

    _runbook(tmp_path)
    assert main(["validate", str(tmp_path / "rb.yaml")]) == 0
    err = capsys.readouterr().err
    assert "warning: detection: checkpoint_freshness, provider, training_progress all reach" in err
    assert "Traceback" not in err
