"""A ledger that cannot be written stops the failover before anything is fenced, in one line."""

import pytest

from lifeboat_dr.core.failover.walk import execute
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.wiring import new_ledger, settings_for
from lifeboat_dr.kernel.errors import WriteFailed
from lifeboat_dr.testing.failover_steps import ScriptedSteps, scripted_runbook
from tests.failover.conftest import Gate


def test_an_unwritable_ledger_stops_the_failover_before_fencing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = blocker / "ledger.jsonl"  # its folder is a file: cannot be created
    rb = scripted_runbook()
    steps = ScriptedSteps({})
    ledger = new_ledger(rb, "run-1", sink=LedgerFile(path))

    with pytest.raises(WriteFailed) as caught:
        execute(settings_for(rb), steps, ledger, gate := Gate(), run_id="run-1")
    assert str(caught.value) == f"cannot write the RTO ledger {path}: File exists"
    ran = [c[0] for c in steps.calls]
    assert "confirm" in ran and "fence" not in ran, "fenced with no ledger to say so"
    assert gate.cards == [], "asked for approval with no ledger"


def test_lifeboat_failover_with_an_unwritable_ledger_is_one_line_before_any_flow_runs(
    tmp_path, monkeypatch, capsys
):
    from pathlib import Path

    from lifeboat_dr.shell.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(blocker / "ledger.jsonl"))
    demo = Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml"
    assert main(["failover", str(demo), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err == f"lifeboat failover: cannot write the RTO ledger {blocker / 'ledger.jsonl'}: File exists\n"
