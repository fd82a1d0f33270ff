"""The signal log under an alert storm: each webhook appends to the log instead of rewriting
it, the log is compacted now and then, and it stays bounded per runbook and per origin (one
Alertmanager group is one origin) however many groups arrive — without losing the live
failing readings the quorum counts."""

from __future__ import annotations

from datetime import timedelta

from lifeboat_dr.core.detection.log import SignalLog
from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy
from lifeboat_dr.core.detection.signals import Reading, Status

POLICY = QuorumPolicy(signals=("alertmanager", "provider"), quorum=2, window=timedelta(minutes=5))
LABELS = {f"label_{i}": "x" * 40 for i in range(20)}  # a real alert's labels: ~1.5 KB of evidence


def alert(group: int, status: str, at, hold=timedelta(hours=4)) -> Reading:
    return Reading(
        "alertmanager",
        f"alertmanager:fp{group}",
        Status(status),
        at,
        f"DCGMXidCritical {status}",
        evidence={"labels": LABELS, "group_key": f"{{}}:{{group={group}}}"},
        expires=at + hold if status == "failing" else None,
        origin=f"alertmanager-group:{group}",
    )


def test_3000_alert_groups_leave_a_bounded_log(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    for g in range(3000):
        log.observe([alert(g, "failing" if g % 3 else "ok", clock())], POLICY)
        clock.advance(seconds=1)
    size = log.path.stat().st_size
    assert size < 1_000_000, f"{size:,} bytes after 3,000 groups"
    readings, decision = log._load()
    assert len({r.origin for r in readings}) <= 256
    assert decision.state is OutageState.suspected  # one signal, however many groups claim it


def test_a_webhook_appends_to_the_log_it_does_not_rewrite_it(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    log.observe([alert(1, "failing", clock())], POLICY)
    before, inode = log.path.read_bytes(), log.path.stat().st_ino
    for g in range(2, 6):
        clock.advance(seconds=5)
        log.observe([alert(g, "failing", clock())], POLICY)
        after = log.path.read_bytes()
        assert after.startswith(before) and log.path.stat().st_ino == inode  # appended in place
        before = after


def test_a_storm_of_other_groups_does_not_push_out_the_live_failing_ones(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    log.observe([alert(1, "failing", clock())], POLICY)
    for g in range(2, 1500):  # a flood of resolved groups from elsewhere
        clock.advance(seconds=1)
        log.observe([alert(g, "ok", clock())], POLICY)
    clock.advance(seconds=1)
    decision = log.observe(
        [Reading("provider", "status-page", Status.failing, clock(), "provider says us-east is down")], POLICY
    )
    assert decision.state is OutageState.confirmed, decision.summary
    assert sorted(decision.voting) == ["alertmanager", "provider"]


def test_a_source_keeps_a_bounded_number_of_readings_and_its_newest(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    for _ in range(500):  # one chatty group, re-sent every few seconds
        log.observe([alert(7, "failing", clock())], POLICY)
        clock.advance(seconds=2)
    readings, _ = log._load()
    assert len(readings) <= 64 and log.latest("alertmanager:fp7").at == clock() - timedelta(seconds=2)


def test_a_huge_reading_is_kept_trimmed(tmp_path, clock):
    log = SignalLog("guarded", tmp_path, clock=clock)
    huge = Reading(
        "provider", "status-page", Status.failing, clock(), "s" * 100_000, evidence={"x": "y" * 500_000}
    )
    log.observe([huge], POLICY)
    assert log.path.stat().st_size < 20_000
    (kept,), _ = log._load()
    assert kept.failing and kept.source == "status-page" and len(kept.summary) <= 300
