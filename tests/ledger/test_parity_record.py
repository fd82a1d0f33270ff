"""The three parity outcomes, with coverage, are kept apart in the ledger and in `lifeboat report`."""

from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.ledger import LedgerFile, ParityRecord, RtoLedger
from lifeboat_dr.core.timeline import entry_markdown, history_rows
from lifeboat_dr.shell.cli import main

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _entry(run_id: str, record: ParityRecord, sink=None):
    ledger = RtoLedger(
        "job-a", run_id, rto_target=timedelta(hours=1), rpo_target=timedelta(hours=1), sink=sink
    )
    ledger.mark("outage_start", T0)
    ledger.checkpoint(
        f"gs://dr/ck/step-{record.checkpoint_step}", T0 - timedelta(minutes=5), record.checkpoint_step
    )
    ledger.parity(record)
    return ledger.finish()


RECORDS = {
    "ok": ParityRecord(outcome="passed", compared=5, asked=5, checkpoint_step=40, replayed_from=35, detail="5 step(s) in 36..40 within 0"),
    "bad": ParityRecord(outcome="mismatch", compared=5, asked=5, checkpoint_step=40, detail="step 41: 2.3 vs 2.29"),
    "none": ParityRecord(outcome="not provable", compared=1, asked=20, checkpoint_step=40, detail="1 of 20 asked step(s) compared, below 0.5"),
}  # fmt: skip


def test_history_rows_show_outcome_coverage_and_how_it_was_proved():
    rows = {r["run"]: r for r in history_rows([_entry(k, v) for k, v in RECORDS.items()])}
    assert rows["ok"]["parity"] == "passed (5/5, replay of step 35)"
    assert rows["bad"]["parity"] == "mismatch (5/5)"
    assert rows["none"]["parity"] == "not provable (1/20)"
    assert {r["resumed from"] for r in rows.values()} == {"step 40"}


def test_the_run_summary_and_the_report_command_name_the_outcome(tmp_path, capsys):
    sink = LedgerFile(tmp_path / "ledger.jsonl")
    entry = _entry("none", RECORDS["none"], sink)
    summary = entry_markdown(entry)
    assert "Loss parity: not provable" in summary and "1 of 20 compared" in summary
    assert LedgerFile(tmp_path / "ledger.jsonl").read("job-a")[0].parity == RECORDS["none"]
    main(["report", "job-a", "--ledger", str(tmp_path / "ledger.jsonl"), "--out", str(tmp_path / "t.png")])
    out = capsys.readouterr().out
    assert "| resumed from | parity |" in out and "| step 40 | not provable (1/20) |" in out
