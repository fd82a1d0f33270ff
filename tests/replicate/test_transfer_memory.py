"""A copy of many files holds memory for the calls in flight, not for every file (#31): the
plan and the copy submit a window of calls at a time (pool.map submitted one Future per file
up front, held for the run), and a file's precondition is derived, not kept."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

from lifeboat_dr.core import transfer
from lifeboat_dr.core.transfer import copy_prefix
from lifeboat_dr.testing.memory_store import MemoryStore


def _files(n: int) -> MemoryStore:
    store = MemoryStore()
    for i in range(n):
        store.put(f"run/step-1/shard-{i:05d}.bin", i.to_bytes(4, "big"))
    return store


class _CountingPool(ThreadPoolExecutor):
    """Counts calls submitted and not finished yet: the Futures the copy holds at once."""

    most = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._open = 0
        self._guard = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        with self._guard:
            self._open += 1
            _CountingPool.most = max(_CountingPool.most, self._open)
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _):
        with self._guard:
            self._open -= 1


def test_a_copy_of_thousands_of_files_holds_a_window_of_calls_not_one_per_file(monkeypatch):
    monkeypatch.setattr(transfer, "ThreadPoolExecutor", _CountingPool)
    _CountingPool.most = 0
    src, dst = _files(3000), MemoryStore()
    report = copy_prefix(src, dst, "run/step-1", "run/step-1", concurrency=4, server_side=False)
    assert len(report.copied) == 3000 and report.complete
    assert _CountingPool.most <= 2 * 4, f"{_CountingPool.most} calls in flight at once for 3,000 files"


def test_memory_a_copy_holds_beyond_its_report_stays_under_a_kilobyte_a_file():
    src, dst = _files(5000), MemoryStore()
    gc.collect()
    tracemalloc.start()
    try:
        report = copy_prefix(src, dst, "run/step-1", "run/step-1", server_side=False)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(report.copied) == 5000
    # what the report and the destination keep is theirs; the rest was per-file state in flight
    in_flight = (peak - kept) / 5000
    assert in_flight < 1024, f"{in_flight:.0f} bytes a file held during the copy beyond what it keeps"
