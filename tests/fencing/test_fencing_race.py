"""16 failovers race for the same epoch, many times over: exactly one wins each time."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from lifeboat_dr.core.fencing import fence, read_lease
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.providers.storage.local import LocalStore

WRITERS = 16
THREAD_TRIALS = 40
S3_TRIALS = 10  # each trial is ~50 HTTP round trips to moto on two shared cores
PROCESS_TRIALS = 8


def _race(store, trial: int, barrier, results, i: int) -> None:
    barrier.wait()
    try:
        lease = fence(store, run_id=f"trial{trial}-writer{i}", holder=f"writer{i}", expect_epoch=trial)
        results.append(lease.run_id)
    except StopFailover:
        results.append(None)


def test_sixteen_threads_racing_to_fence_leave_exactly_one_winner(store):
    for trial in range(S3_TRIALS if store.uri.startswith("s3://") else THREAD_TRIALS):
        barrier, results = threading.Barrier(WRITERS), []
        threads = [
            threading.Thread(target=_race, args=(store, trial, barrier, results, i)) for i in range(WRITERS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if r]
        assert len(results) == WRITERS and len(winners) == 1, (trial, winners)
        lease = read_lease(store)[0]
        assert (lease.epoch, lease.run_id) == (trial + 1, winners[0])


def _process_writer(root: str, trial: int, barrier, queue, i: int) -> None:
    results: list = []
    _race(LocalStore(root), trial, barrier, results, i)
    queue.put(results[0])


@pytest.mark.processes
def test_sixteen_processes_racing_to_fence_a_local_store_leave_exactly_one_winner(tmp_path):
    ctx = multiprocessing.get_context("fork")
    root = str(tmp_path / "secondary")
    for trial in range(PROCESS_TRIALS):
        barrier, queue = ctx.Barrier(WRITERS), ctx.Queue()
        procs = [
            ctx.Process(target=_process_writer, args=(root, trial, barrier, queue, i)) for i in range(WRITERS)
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=60) for _ in procs]
        for p in procs:
            p.join()
        winners = [r for r in results if r]
        assert len(winners) == 1, (trial, winners)
        assert read_lease(LocalStore(root))[0].run_id == winners[0]
