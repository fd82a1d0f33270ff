"""`make demo DEMO_ARGS=--failback` end to end: its own Prefect server, a killed trainer,
detection, the failover, then the failback to the recovered primary."""

import pytest

from lifeboat_dr.demo import training as demo
from tests.demo.test_demo import _assert_passed, _play

pytestmark = pytest.mark.integration


def test_demo_fails_over_then_back_and_prints_both_ledger_entries(monkeypatch, capsys):
    assert _play(monkeypatch, "--seed", "7", "--failback") == 0

    out = capsys.readouterr().out
    _assert_passed(out, 7)
    assert out.count("losses identical to an uninterrupted run") == 2  # on the secondary, then home
    for kind in ("failover", "failback"):
        assert f"{kind}: RTO " in out and f"{kind}: RPO " in out
    assert '"kind":"failover"' in out and '"kind":"failback"' in out and "epoch 2 on" in out
    assert out.count('"outcome":"completed"') == 2
    assert "resumes from step " in out  # handed back: the secondary job's own last commit


def test_failback_demo_refuses_the_torch_trainer_in_one_line(monkeypatch, capsys):
    assert demo.main(["--failback", "--trainer", "torch"]) == 2
    assert capsys.readouterr().err.strip() == (
        "make demo: --failback plays with the numpy trainer only (drop --trainer)"
    )
