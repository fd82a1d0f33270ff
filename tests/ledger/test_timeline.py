from datetime import timedelta

from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.timeline import START_UP_LABEL, entry_markdown, render_timeline, timeline_bars

from .conftest import replay_failover


def test_timeline_picture_is_a_png_with_every_step(clock, tmp_path):
    ledger = RtoLedger(
        "llama-pretrain",
        "run-1",
        rto_target=timedelta(minutes=15),
        rpo_target=timedelta(minutes=30),
        clock=clock,
    )
    entry = replay_failover(ledger, clock)
    out = render_timeline(entry, tmp_path / "timeline.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_timeline_of_a_failed_run_draws_the_failed_step(clock, tmp_path):
    ledger = RtoLedger(
        "llama-pretrain",
        "run-2",
        rto_target=timedelta(minutes=15),
        rpo_target=timedelta(minutes=30),
        clock=clock,
    )
    entry = replay_failover(ledger, clock, fail_at="provisioned")
    out = render_timeline(entry, tmp_path / "failed.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_the_flows_start_up_between_detection_and_the_confirm_step_is_a_phase_of_its_own(clock):
    """The demo's RTO was 1.21x its steps' critical path: 1.17 s between detection and the
    confirm step (the run created, its runbook loaded and wired) belonged to no step (#31)."""
    ledger = RtoLedger(
        "demo", "run-3", rto_target=timedelta(minutes=2), rpo_target=timedelta(minutes=2), clock=clock
    )
    ledger.mark("outage_start")
    detected = ledger.mark("detected", clock.advance(4))
    ledger.begin("confirmed", clock.advance(1.17))
    ledger.mark("confirmed", clock.advance(0.05))

    entry = ledger.entry
    assert entry.start_up == (detected, detected + timedelta(seconds=1.17))
    assert [label for label, _ in timeline_bars(entry)][:3] == ["detect", START_UP_LABEL, "confirm"]
    assert f"| {START_UP_LABEL} | 1.17s |" in entry_markdown(entry)
