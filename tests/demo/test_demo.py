"""`make demo` end to end: its own Prefect server, a killed trainer, detection, failover."""

import os

import pytest

from flows import demo

pytestmark = pytest.mark.integration


def test_demo_kills_fails_over_and_proves_identical_losses(monkeypatch, capsys):
    monkeypatch.chdir(demo.ROOT)  # the demo works from the repository root; restore cwd after
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", os.environ.get("LIFEBOAT_STATE_DIR", ""))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(demo.ROOT / ".lifeboat" / "demo" / "ledger.jsonl"))

    assert demo.main(["--seed", "7"]) == 0

    out = capsys.readouterr().out
    assert "2. SIGKILL at step " in out and "(seed 7)" in out
    assert "confirmed: 2 of 2 signal(s) agree" in out
    assert ": met" in out and "MISSED" not in out
    assert "losses identical to an uninterrupted run" in out
    assert "demo passed" in out
    assert not list((demo.ROOT / "runbooks/.lifeboat/clusters").glob("*/state.json")), (
        "the demo leaked a cluster"
    )
