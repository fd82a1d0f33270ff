"""`make demo DEMO_ARGS=--serving` end to end: real HAProxy, two toy servers, an independent client."""

import pytest

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.demo import training as demo

pytestmark = pytest.mark.integration


def test_serving_demo_moves_traffic_to_the_verified_standby_within_the_target(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(demo.ROOT)
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))

    assert demo.main(["--serving"]) == 0

    out = capsys.readouterr().out
    assert "SIGKILL the primary model server" in out and "confirmed: 2 of 2 signals agree" in out
    assert "client-visible error window" in out and ": met;" in out and "demo passed" in out
    (entry,) = LedgerFile(tmp_path / "ledger.jsonl").read("demo-serving")
    assert entry.table == "serving" and entry.outcome == "completed" and entry.drill
    assert entry.client.errors >= 1 and entry.client.window.total_seconds() <= 10
    assert {"standby_verified", "traffic_switched", "watch_passed"} <= set(entry.phases)


def test_serving_demo_refuses_a_standby_on_other_weights(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(demo.ROOT)
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))

    assert demo.main(["--serving", "--bad-standby"]) == 0

    out = capsys.readouterr().out
    assert "model version: standby serves" in out and "got no traffic" in out
    (entry,) = LedgerFile(tmp_path / "ledger.jsonl").read("demo-serving")
    assert entry.outcome == "failed" and "traffic_switched" not in entry.phases
