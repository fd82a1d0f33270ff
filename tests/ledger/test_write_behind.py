"""Ledger saves written behind (the failover walker's): order kept, errors not lost,
snapshots as they were, everything landed once `finish()` returns."""

import threading
from datetime import timedelta

import pytest

from lifeboat_dr.core.ledger import LedgerFile, RtoLedger
from lifeboat_dr.kernel.errors import WriteFailed


class SlowSink:
    """A sink whose writes wait for `release` (a slow fsync or a chain store write)."""

    def __init__(self, fail_on: int | None = None):
        self.release, self.written, self.fail_on = threading.Event(), [], fail_on

    def append(self, entry):
        self.release.wait(5)
        if self.fail_on is not None and len(self.written) == self.fail_on:
            self.written.append(None)
            raise WriteFailed("cannot write the RTO ledger /x: No space left on device")
        self.written.append(entry.model_dump())


def _ledger(clock, sink):
    return RtoLedger(
        "job",
        "run-1",
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        clock=clock,
        sink=sink,
    )


def test_the_caller_goes_on_while_the_write_is_under_way_and_finish_waits_for_it(clock):
    sink = SlowSink()
    ledger = _ledger(clock, sink)
    with ledger.writing_behind():
        with ledger.batch():
            ledger.mark("outage_start")
            ledger.mark("detected")
        assert sink.written == []  # still writing: the caller was not held
        sink.release.set()
        ledger.finish("completed")
    assert [w["outcome"] for w in sink.written] == ["in-progress", "completed"]


def test_a_snapshot_is_written_as_it_was_when_saved(clock):
    sink = SlowSink()
    ledger = _ledger(clock, sink)
    with ledger.writing_behind():
        ledger.mark("outage_start")
        ledger.entry.notes["later"] = "changed after the save"  # the writer has not run yet
        sink.release.set()
    assert sink.written[0]["notes"] == {}


def test_writes_behind_and_direct_ones_land_in_order_the_last_line_is_the_newest(clock, tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = _ledger(clock, LedgerFile(path))
    with ledger.writing_behind():
        for phase in ("outage_start", "detected", "confirmed"):
            ledger.mark(phase)
    ledger.note("direct", "written after the three behind")
    (entry,) = LedgerFile(path).read()  # the last line of the run
    assert set(entry.phases) == {"outage_start", "detected", "confirmed"} and "direct" in entry.notes
    assert len(path.read_text().splitlines()) == 4


def test_a_failed_write_behind_is_raised_at_the_next_save_not_lost(clock):
    sink = SlowSink(fail_on=0)
    sink.release.set()
    ledger = _ledger(clock, sink)
    with pytest.raises(WriteFailed, match="No space left"), ledger.writing_behind():
        ledger.mark("outage_start")
        ledger.finish("completed")
    ledger.finish("failed")  # raised once; the next save goes through
    assert sink.written[-1]["outcome"] == "failed"
