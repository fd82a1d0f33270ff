"""`make demo DEMO_ARGS=--failback` end to end: its own Prefect server, a killed trainer,
detection, failover, then the failback to the recovered primary."""

import os

import pytest

from flows import demo

pytestmark = pytest.mark.integration


def test_demo_kills_fails_over_fails_back_and_proves_identical_losses(monkeypatch, capsys):
    monkeypatch.chdir(demo.ROOT)  # the demo works from the repository root; restore cwd after
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", os.environ.get("LIFEBOAT_STATE_DIR", ""))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(demo.ROOT / ".lifeboat" / "demo" / "ledger.jsonl"))

    assert demo.main(["--seed", "7", "--failback"]) == 0

    out = capsys.readouterr().out
    assert "2. SIGKILL at step " in out and "(seed 7)" in out
    assert "confirmed: 2 of 2 signal(s) agree" in out
    assert ": met" in out and "MISSED" not in out
    assert out.count("losses identical to an uninterrupted run") == 2  # on the secondary, then home
    assert "failover: RTO" in out and "failback: RTO" in out and "failback: RPO" in out
    assert '"kind":"failback"' in out and '"outcome":"completed"' in out and "epoch 2 on" in out
    assert "demo passed" in out
    assert not list((demo.ROOT / "runbooks/.lifeboat/clusters").glob("*/state.json")), (
        "the demo leaked a cluster"
    )
