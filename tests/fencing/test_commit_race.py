"""16 guarded commits race one fence, round after round: every round consistent.

A round is consistent when every writer that was told "committed" has a marker that
certification counts (`marker_is_fenced_out` is False under the final lease), and every
writer told "fenced out" has no marker that counts. The old protocol (check, put, check,
with the marker judged by timestamps) was inconsistent in 37-75 of 300 rounds on LocalStore
(benchmarks/fencing.py).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from lifeboat_dr.core.fencing import fence, guarded_commit, marker_is_fenced_out, read_lease
from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable, StopFailover
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.memory_store import MemoryStore

WRITERS = 16
MEMORY_ROUNDS = 1000
LOCAL_ROUNDS = 40
S3_ROUNDS = 3  # 16 writers contending on one lease: ~1,000 requests a round to moto (~13 s here)
FENCE_TRIES = 3
GCS_ROUNDS = 30  # fake-gcs-server: ~1 s a round here; benchmarks/fencing.py runs 1,000


def race_round(
    store, n: int, rng: random.Random, pool: ThreadPoolExecutor | None = None, tally: Counter | None = None
) -> tuple[bool, int]:
    """One round on a store at epoch 0: (consistent, writers whose commit counted). A writer
    is told "committed", "fenced" or, when the lease kept changing under its reads (16
    writers on one lease: GCS reads it in 4 requests), "unavailable", which must leave no
    marker that counts; `tally` adds up what they were told. The fence, retried on
    `ProviderUnavailable` as the failover's step is, must win (it has no rival), or the test fails.

    Without `pool` the round starts 17 fresh threads, whose staggered starts spread the
    writers out (they caught the old protocol on LocalStore in ~15 of 40 rounds, a reused
    pool in ~11). With `pool` (17 threads reused round after round, five times faster) the
    writers start together and finish sooner, so the fence comes within a shorter window."""
    barrier = threading.Barrier(WRITERS + 1)
    told: dict[int, str] = {}
    fenced: list[BaseException | None] = []
    delay = rng.random() * (0.002 if pool is None else 0.0005)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            guarded_commit(store, f"r{n}/step-{i}/lifeboat-commit.json", 0, i)
            told[i] = "committed"
        except StopFailover:
            told[i] = "fenced"
        except ProviderUnavailable:
            told[i] = "unavailable"

    def fencer() -> None:
        barrier.wait()
        threading.Event().wait(delay)
        for attempt in range(FENCE_TRIES):  # retried on ProviderUnavailable, as the failover's step is
            try:
                fence(store, run_id=f"round-{n}", holder="secondary")
                fenced.append(None)
                return
            except ProviderUnavailable as e:  # the lease kept changing under its reads
                if attempt + 1 == FENCE_TRIES:
                    fenced.append(e)
            except Exception as e:  # a thread's exception would only be printed
                fenced.append(e)
                return

    if pool is not None:
        for done in [pool.submit(writer, i) for i in range(WRITERS)] + [pool.submit(fencer)]:
            done.result()
    else:
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        threads.append(threading.Thread(target=fencer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if tally is not None:
        tally.update(told.values())
    lease = read_lease(store)[0]
    counted = 0
    assert fenced == [None], f"round {n}: the fence failed: {fenced[0]}"
    consistent = len(told) == WRITERS
    for i, outcome in told.items():
        try:
            marker = b"".join(store.read(f"r{n}/step-{i}/lifeboat-commit.json"))
            counts = not marker_is_fenced_out(marker, lease)
        except NotFound:
            counts = False
        counted += counts
        consistent &= counts == (outcome == "committed")
    return consistent, counted


def test_sixteen_commits_racing_a_fence_a_thousand_times_never_disagree_with_certification():
    rng = random.Random(13)
    with ThreadPoolExecutor(WRITERS + 1) as pool:  # MemoryStore cannot show the old protocol's flaw
        results = [race_round(MemoryStore(), n, rng, pool) for n in range(MEMORY_ROUNDS)]
    assert [n for n, (ok, _) in enumerate(results) if not ok] == []
    mixed = sum(0 < counted < WRITERS for _, counted in results)
    assert mixed > 0, "no round actually raced: commits and the fence never interleaved"


def test_sixteen_commits_racing_a_fence_on_a_local_store_never_disagree_with_certification(tmp_path):
    # The store where the old check-put-check protocol disagreed in 37-75 of 300 rounds.
    rng = random.Random(13)
    results = [race_round(LocalStore(tmp_path / str(n)), n, rng) for n in range(LOCAL_ROUNDS)]
    assert [n for n, (ok, _) in enumerate(results) if not ok] == []


@pytest.mark.integration
def test_sixteen_commits_racing_a_fence_on_s3_never_disagree_with_certification(s3_endpoint):
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    rng = random.Random(13)
    for n in range(S3_ROUNDS):
        store = S3Store(new_s3_bucket(s3_endpoint), f"race/{n}", endpoint_url=s3_endpoint)
        assert race_round(store, n, rng)[0], n


@pytest.mark.integration
def test_sixteen_commits_racing_a_fence_on_gcs_never_disagree_with_certification(fake_gcs_endpoint):
    """On fake-gcs-server, which refuses a lost ifGenerationMatch as GCS does (the GCS
    emulator would let a stale commit count: tests/storage/test_gcs_preconditions.py)."""
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.testing.emulators import new_gcs_bucket

    rng, told = random.Random(13), Counter()
    results = [  # a bucket a round: fake-gcs-server scans a bucket's objects on every write
        race_round(
            GcsStore(new_gcs_bucket(fake_gcs_endpoint), "race", endpoint_url=fake_gcs_endpoint),
            n,
            rng,
            tally=told,
        )
        for n in range(GCS_ROUNDS)
    ]
    assert [n for n, (ok, _) in enumerate(results) if not ok] == [], told
    assert told["committed"] > 0 and told["fenced"] > 0, told  # the commits raced the fence
