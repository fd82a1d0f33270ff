"""`lifeboat report RUNBOOK --verify`: the ledger chain checked from the command line, and
the history read from one site while the other is gone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lifeboat_dr.flows.wiring import build_ledger
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main as lifeboat

from .conftest import replay_failover

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(tmp_path, monkeypatch, clock):
    """The demo runbook in a scratch folder (its sites are folders beside it), one failover
    recorded by the flow's own ledger with LIFEBOAT_LEDGER_CHAIN=sites."""
    (tmp_path / "runbooks").mkdir()
    path = tmp_path / "runbooks" / "demo.yaml"
    shutil.copy(ROOT / "runbooks" / "demo.yaml", path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIFEBOAT_LEDGER_CHAIN", "sites")
    ledger = build_ledger(load_runbook(path), run_id="run-1", path=tmp_path / "ledger.jsonl")
    ledger.clock = clock
    replay_failover(ledger, clock)
    return path


def _chain(site: Path) -> list[Path]:
    return sorted((site / "_lifeboat" / "chain" / "demo").glob("*.json"))


def test_verify_passes_on_the_chain_both_sites_hold(demo, capsys):
    assert len(_chain(demo.parents[1] / ".lifeboat/demo/primary")) > 10
    assert lifeboat(["report", str(demo), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "NOT" not in out and "warning" not in out


def test_verify_fails_naming_the_edited_record_and_the_site(demo, capsys):
    record = _chain(demo.parents[1] / ".lifeboat/demo/primary")[4]
    doc = json.loads(record.read_text())
    doc["entry"]["notes"]["approved by"] = "U0MALLORY"
    record.write_text(json.dumps(doc))
    assert lifeboat(["report", str(demo), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: seq 5: tampered in file://" in out and "primary" in out and "NOT intact" in out


def test_the_history_reads_from_the_secondary_with_the_primary_gone(demo, capsys):
    shutil.rmtree(demo.parents[1] / ".lifeboat/demo/primary")
    assert lifeboat(["report", str(demo), "--chain", "sites", "--out", "t.png"]) == 0
    out = capsys.readouterr().out
    assert "1 failover recorded" in out and "run-1" in out
    assert lifeboat(["report", str(demo), "--verify"]) == 0  # behind, not broken
    assert "behind" in capsys.readouterr().out


def test_verify_by_name_needs_store_uris_not_sites(demo, capsys):
    assert lifeboat(["report", "demo", "--verify"]) == 1
    assert "--chain sites needs the runbook file" in capsys.readouterr().err
