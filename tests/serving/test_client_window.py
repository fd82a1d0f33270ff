"""The client-visible error window: from the client's own log, recorded and drawn."""

from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.ledger import LedgerFile, RtoLedger
from lifeboat_dr.core.timeline import entry_markdown, render_timeline
from lifeboat_dr.standins.serving_client import client_window, read_samples

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def s(at: float, ok: bool) -> dict:
    return {"t": T0.timestamp() + at, "ok": ok, "status": 200 if ok else 503, "ms": 2.0}


def test_window_runs_from_the_first_error_to_the_first_good_request_after_the_switch():
    samples = [s(0.0, True), s(1.0, False), s(1.1, True), s(1.2, False), s(2.4, True), s(2.5, True)]
    w = client_window(samples, T0 + timedelta(seconds=2), "test")
    assert w.window == timedelta(seconds=1.4) and (w.requests, w.errors) == (6, 2)


def test_no_errors_is_a_zero_window_and_no_recovery_is_none():
    assert client_window([s(0, True), s(1, True)], T0, "t").window == timedelta(0)
    assert client_window([s(0, True), s(1, False)], T0, "t").window is None


def test_a_torn_last_line_from_a_killed_client_is_skipped(tmp_path):
    log = tmp_path / "client.jsonl"
    log.write_text('{"t": 1, "ok": true, "status": 200, "ms": 1}\n{"t": 2, "ok": fa')
    assert read_samples(log) == [{"t": 1, "ok": True, "status": 200, "ms": 1}]
    assert read_samples(tmp_path / "never-written.jsonl") == []


def test_the_window_is_in_the_ledger_the_summary_and_the_picture(tmp_path):
    sink = LedgerFile(tmp_path / "ledger.jsonl")
    ledger = RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), sink=sink, table="serving"
    )
    ledger.mark("outage_start", T0)
    ledger.mark("detected", T0 + timedelta(seconds=0.2))
    ledger.mark("confirmed", T0 + timedelta(seconds=0.4))
    ledger.begin("standby_verified", T0 + timedelta(seconds=0.4))
    ledger.mark("standby_verified", T0 + timedelta(seconds=0.5))
    ledger.begin("traffic_switched", T0 + timedelta(seconds=0.5))
    ledger.mark("traffic_switched", T0 + timedelta(seconds=0.6))
    ledger.client_window(
        client_window([s(0.05, False), s(0.7, True)], T0 + timedelta(seconds=0.6), "test client")
    )
    entry = sink.read("chat")[0]
    assert entry.table == "serving" and entry.client.window == timedelta(seconds=0.65)
    assert entry.rto == timedelta(seconds=0.6) and not entry.needs_rca
    text = entry_markdown(entry)
    assert "| client-visible error window | 650ms | 10s | 0.07× | met |" in text
    assert text.index("| standby_verified") < text.index("| traffic_switched")
    png = render_timeline(entry, tmp_path / "t.png")
    assert png.stat().st_size > 1000


def test_a_window_past_the_target_asks_for_a_root_cause_analysis():
    ledger = RtoLedger(
        "chat", "r1", rto_target=timedelta(seconds=10), rpo_target=timedelta(0), table="serving"
    )
    ledger.client_window(client_window([s(0, False), s(13, True)], T0, "t"))
    assert any("client-visible error window 13s is 30% over" in r for r in ledger.entry.rca_reasons)
