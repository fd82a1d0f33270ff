from datetime import timedelta

from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.timeline import render_timeline

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
