from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.ledger import LedgerFile, LedgerStore, RtoLedger
from lifeboat_dr.core.timeline import entry_markdown, history_markdown, history_rows, phase_rows
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.local import LocalStore

from .conftest import OUTAGE, replay_failover


def _ledger(clock, **kw):
    return RtoLedger(
        "llama-pretrain",
        kw.pop("run_id", "run-1"),
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        clock=clock,
        **kw,
    )


def test_rto_runs_from_outage_start_to_the_first_healthy_step(clock):
    entry = replay_failover(_ledger(clock), clock)
    assert entry.rto == entry.phases["first_step"] - OUTAGE == timedelta(seconds=520)
    assert entry.rpo == timedelta(minutes=12)
    assert entry.outcome == "completed" and not entry.needs_rca


def test_rto_more_than_twenty_percent_over_target_flags_a_root_cause_analysis(clock):
    entry = replay_failover(_ledger(clock), clock, provision_s=2000)  # RTO 37m > 1.2 x 30m
    assert entry.rto_ratio > 1.2 and entry.needs_rca
    assert entry.rca_reasons[0].startswith("RTO 37m") and "over its target 30m" in entry.rca_reasons[0]


def test_slightly_over_target_is_reported_but_needs_no_rca(clock):
    entry = replay_failover(_ledger(clock), clock, provision_s=1700)  # 32m: 1.07x
    assert 1 < entry.rto_ratio <= 1.2 and not entry.needs_rca
    assert "| RTO | 32m | 30m | 1.07× | over target |" in entry_markdown(entry)


def test_failed_provisioning_is_recorded_with_its_error_and_needs_rca(clock):
    entry = replay_failover(_ledger(clock), clock, fail_at="provisioned")
    assert entry.outcome == "failed" and entry.rto is None
    assert entry.rca_reasons == ["failed at provisioned: RuntimeError: no H100 capacity in any candidate"]
    assert phase_rows(entry)[-1]["phase"] == "FAILED before provisioned"


def test_re_marking_a_phase_keeps_the_first_time(clock):
    ledger = _ledger(clock)
    first = ledger.mark("fenced")
    clock.advance(99)
    assert ledger.mark("fenced") == first


def test_unknown_phase_is_refused(clock):
    with pytest.raises(ValueError, match="unknown ledger phase 'fencd'"):
        _ledger(clock).mark("fencd")


def test_concurrent_steps_span_from_their_own_start(clock):
    entry = replay_failover(_ledger(clock), clock)
    start, stop = entry.span("certified")
    assert start == entry.phases["fenced"] and (stop - start) == timedelta(seconds=28)
    assert entry.span("planned")[0] == entry.phases["fenced"]


def test_every_snapshot_is_appended_and_the_last_one_per_run_wins(clock, tmp_path):
    sink = LedgerFile(tmp_path / ".lifeboat" / "ledger.jsonl")
    replay_failover(_ledger(clock, sink=sink), clock)
    drill = _ledger(clock, sink=sink, run_id="drill-1", drill=True)
    drill.mark("outage_start")
    assert len(sink.path.read_text().splitlines()) > 2
    entries = sink.read("llama-pretrain")
    assert [(e.run_id, e.outcome, e.drill) for e in entries] == [
        ("run-1", "completed", False),
        ("drill-1", "in-progress", True),
    ]
    assert entries[0].rto == timedelta(seconds=520)
    assert sink.read("other-job") == []


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_ledger_in_a_store_reads_back_like_the_file(clock, tmp_path, backend):
    from lifeboat_dr.testing.memory_store import MemoryStore

    sink = LedgerStore(LocalStore(tmp_path / "bucket") if backend == "local" else MemoryStore())
    replay_failover(_ledger(clock, sink=sink), clock)
    (entry,) = sink.read("llama-pretrain")
    assert entry.rto == timedelta(seconds=520) and entry.notes["approved by"] == "U0ALICE via slack"


def test_a_corrupt_ledger_line_names_its_file_and_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"runbook": "x"}\n')
    with pytest.raises(ConfigError, match=r"ledger.jsonl:1: not a ledger entry"):
        LedgerFile(path).read()


def test_history_table_marks_drills_and_rca(clock):
    done = replay_failover(_ledger(clock), clock, provision_s=2000)
    rows = history_rows([done])
    assert rows[0]["kind"] == "failover" and rows[0]["RCA"] == "yes" and rows[0]["RTO"] == "37m"
    assert history_markdown([done]).splitlines()[0].startswith("| run | kind |")
    assert history_markdown([]) == "No failovers or drills recorded yet.\n"


def test_a_re_run_reads_its_run_back_and_goes_on_in_it_first_times_kept(clock, tmp_path):
    sink = LedgerFile(tmp_path / "ledger.jsonl")
    first = _ledger(clock, sink=sink)
    first.mark("outage_start")
    first.checkpoint("file:///s/step-00000040", clock(), 40)
    first.step_done("certify")
    _ledger(clock, sink=sink, run_id="run-2").mark("outage_start")  # another run's lines between

    prior = sink.entry("llama-pretrain", "run-1")
    again = _ledger(clock, sink=sink, prior=prior)
    again.mark("outage_start")
    assert (prior.checkpoint_step, prior.done) == (40, ["certify"])
    assert again.entry.phases["outage_start"] == first.entry.phases["outage_start"]
    assert sink.entry("llama-pretrain", "run-3") is None and sink.entry("other-job", "run-1") is None


def test_a_snapshot_torn_by_a_crash_mid_write_is_skipped_and_the_next_one_starts_its_own_line(
    clock, tmp_path
):
    sink = LedgerFile(tmp_path / "ledger.jsonl")
    ledger = _ledger(clock, sink=sink)
    ledger.mark("outage_start")
    with open(sink.path, "a") as f:  # the writer was SIGKILLed half way through its line
        f.write(ledger.entry.model_dump_json()[:40])
    assert sink.entry("llama-pretrain", "run-1").phases.keys() == {"outage_start"}

    ledger.mark("detected")
    assert sink.entry("llama-pretrain", "run-1").phases.keys() == {"outage_start", "detected"}
    assert len(sink.path.read_text().splitlines()) == 3


@pytest.mark.parametrize("backend", ["file", "store"])
def test_a_run_reads_back_from_a_store_and_through_the_chain_too(clock, tmp_path, backend):
    from lifeboat_dr.core.ledger_chain import LedgerChain, TeedLedger

    store = LocalStore(tmp_path / "bucket")
    sink = (
        LedgerStore(store)
        if backend == "store"
        else TeedLedger(LedgerFile(tmp_path / "l"), LedgerChain([store]))
    )
    ledger = _ledger(clock, sink=sink)
    ledger.mark("outage_start")
    ledger.step_done("confirm")
    assert sink.entry("llama-pretrain", "run-1").done == ["confirm"]
    if backend == "file":  # a re-run on another worker: not in its file, in the chain
        other = TeedLedger(LedgerFile(tmp_path / "elsewhere"), LedgerChain([store]))
        assert other.entry("llama-pretrain", "run-1").done == ["confirm"]


def test_a_checkpoint_written_after_the_outage_by_the_clocks_is_an_unknown_rpo_not_zero():
    """Found by the fault simulator: the control plane's clock stepped 10 min ahead between the
    outage's stamp and certification; the checkpoint looked written 9.6 min after the outage and
    the RPO read 0, hiding 15 s of lost work. Now it is unknown, and the RCA says why."""
    from lifeboat_dr.core.ledger import LedgerEntry

    outage = datetime(2026, 3, 1, 8, 0, 30, tzinfo=UTC)
    entry = LedgerEntry(
        runbook="lb",
        run_id="fo-1",
        rto_target=timedelta(minutes=10),
        rpo_target=timedelta(minutes=1),
        phases={"outage_start": outage},
        checkpoint_written_at=outage + timedelta(minutes=9, seconds=40),
    )
    assert entry.rpo is None
    assert any("RPO unknown" in r and "clocks disagree" in r for r in entry.rca_reasons)
    near = entry.model_copy(update={"checkpoint_written_at": outage + timedelta(seconds=1)})
    assert near.rpo == timedelta(0)  # within a store's whole-second clock: no work lost
