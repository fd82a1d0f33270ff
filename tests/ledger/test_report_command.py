from datetime import timedelta
from pathlib import Path

from lifeboat_dr.core.ledger import LedgerFile, RtoLedger
from lifeboat_dr.shell.cli import main as lifeboat

from .conftest import replay_failover

RUNBOOK = Path(__file__).parents[2] / "runbooks" / "llama-70b-pretrain.yaml"


def _record(tmp_path, clock, **kw):
    sink = LedgerFile(tmp_path / ".lifeboat" / "ledger.jsonl")
    ledger = RtoLedger(
        "llama-70b-pretrain",
        kw.pop("run_id", "run-1"),
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        sink=sink,
        clock=clock,
        **kw,
    )
    replay_failover(ledger, clock, provision_s=2000)
    return sink


def test_report_prints_the_history_and_draws_the_latest_run(tmp_path, clock, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sink = _record(tmp_path, clock)
    assert lifeboat(["report", str(RUNBOOK), "--ledger", str(sink.path)]) == 0
    out = capsys.readouterr().out
    assert "| run-1 | failover |" in out and "| 37m | 1.23× |" in out
    assert "RCA: RTO 37m is 23% over its target 30m" in out
    png = tmp_path / ".lifeboat" / "timelines" / "llama-70b-pretrain-run-1.png"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_report_on_a_job_with_no_history_says_so(tmp_path, capsys):
    assert lifeboat(["report", "llama-pretrain", "--ledger", str(tmp_path / "none.jsonl")]) == 0
    assert "No failovers or drills recorded yet." in capsys.readouterr().out


def test_report_for_an_unknown_run_is_a_one_line_error(tmp_path, clock, capsys):
    sink = _record(tmp_path, clock)
    assert (
        lifeboat(
            [
                "report",
                "llama-70b-pretrain",
                "--ledger",
                str(sink.path),
                "--run",
                "nope",
                "--out",
                str(tmp_path / "t.png"),
            ]
        )
        == 1
    )
    assert (
        capsys.readouterr().err.strip()
        == "lifeboat report: no run 'nope' for llama-70b-pretrain in the ledger"
    )
