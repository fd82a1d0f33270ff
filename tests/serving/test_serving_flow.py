"""The `failover` flow on a realtime-serving runbook: the serving path, on a real Prefect server."""

from pathlib import Path

import pytest

from flows.failover import failover
from lifeboat.ledger import LedgerFile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ledger_path(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def test_dry_run_of_a_serving_runbook_verifies_the_standby_and_moves_traffic(prefect_server, ledger_path):
    result = failover(str(ROOT / "runbooks" / "chat-serving.yaml"), dry_run=True)

    assert result["outcome"] == "completed", result["failures"]
    assert 0 < result["rto_s"] < 10
    assert Path(result["timeline"]).stat().st_size > 10_000
    (entry,) = LedgerFile(ledger_path).read("chat-serving")
    assert entry.kind == "serving" and entry.drill
    assert {"confirmed", "standby_verified", "first_step", "watch_passed"} <= set(entry.phases)
    assert entry.notes["weights_digest"].startswith("sha256:")
