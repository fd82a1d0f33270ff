"""The fakes are tested themselves: MemoryStore enforces what the GCS emulator does not."""

import threading

from lifeboat_dr.kernel.errors import PreconditionFailed, ProviderUnavailable
from lifeboat_dr.testing.memory_store import MemoryStore


def test_memory_fake_enforces_generation_preconditions_the_gcs_emulator_ignores():
    # gcp-storage-emulator accepts a create-only write over an existing object; real GCS
    # answers 412. Tests that need the real behaviour use this fake.
    store = MemoryStore()
    winners, losers = [], []

    def race(i):
        try:
            store.put("lease", f"writer-{i}".encode(), if_none_match=True)
            winners.append(i)
        except PreconditionFailed:
            losers.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 15
    assert b"".join(store.read("lease")) == f"writer-{winners[0]}".encode()


def test_memory_store_in_an_outage_raises_provider_unavailable():
    store = MemoryStore("primary")
    store.put("a", b"1")
    store.outage = True
    try:
        list(store.list())
    except ProviderUnavailable as e:
        assert "memory://primary" in str(e)
    else:
        raise AssertionError("an unreachable store answered")
