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


# A serving drill as ledgers recorded it before the serving switch had its own milestone
# (`first_step`, now `traffic_switched`).
OLD_SERVING_LINE = (
    '{"runbook":"chat-serving","run_id":"serving-kill-1a2b","table":"serving","drill":true,"kind":"drill",'
    '"rto_target":"PT10S","rpo_target":"PT0S","phases":{"outage_start":"2026-11-30T12:00:00Z",'
    '"detected":"2026-11-30T12:00:00.200000Z","confirmed":"2026-11-30T12:00:00.400000Z",'
    '"standby_verified":"2026-11-30T12:00:00.600000Z","first_step":"2026-11-30T12:00:00.700000Z",'
    '"watch_passed":"2026-11-30T12:00:03.700000Z"},"began":{"standby_verified":"2026-11-30T12:00:00.400000Z",'
    '"first_step":"2026-11-30T12:00:00.600000Z","watch_passed":"2026-11-30T12:00:00.700000Z"},'
    '"checkpoint":null,"checkpoint_written_at":null,"failures":[],"outcome":"completed",'
    '"notes":{"drill":"serving-kill"},"client":null}\n'
)


def test_a_serving_entry_written_before_the_switch_had_its_own_milestone_still_reports(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ledger.jsonl"
    path.write_text(OLD_SERVING_LINE)

    (entry,) = LedgerFile(path).read("chat-serving")
    assert "first_step" not in entry.phases and "first_step" not in entry.began
    assert entry.rto == timedelta(seconds=0.7) and entry.span("traffic_switched") is not None
    assert lifeboat(["report", "chat-serving", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| serving-kill-1a2b | serving failover drill |" in out and "| 700ms |" in out
