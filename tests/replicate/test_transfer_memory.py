"""A copy of many files holds memory for the calls in flight, not for every file (#31): the
plan and the copy submit a window of calls at a time (pool.map submitted one Future per file
up front, held for the run), a file's precondition is derived, not kept, and a replication
pass keeps its per-file records compact or in a temporary file (core/transfer_records.py)."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

from lifeboat_dr.core import transfer
from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
from lifeboat_dr.core.checkpoints.layouts import discover
from lifeboat_dr.core.checkpoints.manifest import build_manifest, commit_manifest
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.transfer import copy_prefix
from lifeboat_dr.testing.memory_store import MemoryStore


def _files(n: int, prefix: str = "run/step-1") -> MemoryStore:
    store = MemoryStore()
    for i in range(n):
        store.put(f"{prefix}/shard-{i:05d}.bin", i.to_bytes(4, "big"))
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


def test_a_copy_report_keeps_a_few_bytes_a_file_and_reads_its_keys_from_the_listing():
    """What a copy's report keeps for each file of its caller's listing: a byte of outcome
    flags and where its landed record is (~9 bytes). Its keys per outcome were `Names`
    (copied, planned: ~25 bytes a key each) beside a position and an offset per landed
    object, ~70 bytes a file in all (#31: ~7 MB at 100,000 files)."""
    n = 20_000
    src, dst = _files(n), MemoryStore()
    listing = list(src.list("run/step-1/"))
    gc.collect()
    tracemalloc.start()
    try:
        report = copy_prefix(src, dst, "run/step-1", "run/step-1", server_side=False, sources=listing)
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = snapshot.filter_traces([tracemalloc.Filter(True, "*core/transfer*.py")])
    per_file = sum(s.size for s in mine.statistics("filename")) / n
    assert per_file < 16, f"the report keeps {per_file:.0f} bytes a file"
    assert report.copied == [i.key.removeprefix("run/step-1/") for i in listing] == report.planned
    assert len(report.copied) == n and not report.skipped and not report.server_copied
    assert len(report.landed) == n and next(iter(report.landed)) == "shard-00000.bin"


class _ListsNoChecksum(MemoryStore):
    """A standby whose listing carries no CRC32C (S3's): the pass writes a receipt."""

    capabilities = replace(MemoryStore.capabilities, crc32c_in_list=False)

    def list(self, prefix: str = ""):
        return (replace(info, crc32c=None) for info in super().list(prefix))


def _held_during_a_pass(n: int) -> float:
    """Bytes the pass held at its peak beyond what stays: the stores' objects, the view of
    the standby handed on."""
    src, dst = _files(n, "step_1"), _ListsNoChecksum()
    commit_manifest(src, "step_1", build_manifest(src, "step_1", 1))
    found, standby = discover(src, "manifest"), discover(dst, "manifest")
    gc.collect()
    tracemalloc.start()
    try:
        report = replicate_checkpoints(
            src,
            dst,
            committed_checkpoints(src, "manifest", found),
            rpo_target=timedelta(hours=1),
            source_found=found,
            destination_found=standby,
        )
        moved = report.transfers[0]
        assert not report.failed and len(moved.copied) + len(moved.server_copied) == n + 1
        view = report.destination_found
        del report
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dst.peek(f"step_1/{RECEIPT_NAME}").count(b"\n") == n + 1  # every shard, and the manifest
    assert sum(1 for _ in view.checkpoints[0].files(dst)) == n + 2
    return peak - kept


def test_memory_a_replication_pass_grows_under_20_bytes_a_file_report_included():
    """The pass as `lifeboat replicate` runs it: discoveries taken, a manifest of every file,
    a receipt written, the standby's view handed on; per file, the growth from 2,000 to
    6,000 files (what does not grow with the files, a discovery's cache, cancels out). The
    source listing as a list, a Shard per file, the report's landed and destination dicts
    and the receipt's lines grew it by 136 bytes a file (e648480, beyond its standby view,
    which then kept every object too); the compact records by ~40 (9494441); outcome flags
    and the shard table dropped once planned by ~0 (the fixed transients hide them)."""
    per_file = (_held_during_a_pass(6000) - _held_during_a_pass(2000)) / 4000
    assert per_file < 20, f"the pass held {per_file:.0f} bytes more for each file more"
