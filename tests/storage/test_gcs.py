"""GCS-only behaviour: on the in-process emulator, and on fake-gcs-server where a test needs
generations as GCS keeps them (an overwritten generation is gone: 404)."""

import threading

import pytest

from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable
from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_gcs_bucket


def test_missing_gcs_bucket_names_the_store(gcs_endpoint):
    store = GcsStore("no-such-bucket", "ckpt", endpoint_url=gcs_endpoint)
    with pytest.raises(NotFound, match=r"gs://no-such-bucket/ckpt: bucket 'no-such-bucket' does not exist"):
        list(store.list())


@pytest.fixture
def slow_reads(fake_gcs_endpoint):
    """(store, direct, proxy): `store` reads through a proxy, `direct` writes around it."""
    bucket = new_gcs_bucket(fake_gcs_endpoint)
    with ThrottlingProxy(fake_gcs_endpoint) as proxy:
        yield (
            GcsStore(bucket, "ckpt", endpoint_url=proxy.url),
            GcsStore(bucket, "ckpt", endpoint_url=fake_gcs_endpoint),
            proxy,
        )


def test_a_read_that_meets_an_overwrite_before_its_first_byte_reads_the_new_object(slow_reads):
    """Found by the commit race on fake-gcs-server: a fence read the lease (HEAD: generation
    g1), a guarded commit replaced it, the GET of g1 answered 404, and the fence took the lease
    for missing: "lost the fencing race to ?". The object is there, at a newer generation."""
    store, direct, proxy = slow_reads
    direct.put("_lifeboat/lease.json", b'{"epoch": 0, "commits": 1}')
    proxy.inject("delay", "alt=media", seconds=1.0)  # the HEAD answers; the GET waits
    commit = threading.Timer(0.3, direct.put, ("_lifeboat/lease.json", b'{"epoch": 0, "commits": 2}'))
    commit.start()
    assert b"".join(store.read("_lifeboat/lease.json")) == b'{"epoch": 0, "commits": 2}'
    commit.join()


def test_a_read_whose_object_is_overwritten_midway_is_unavailable_not_missing(slow_reads):
    store, direct, proxy = slow_reads
    direct.put("shard", b"a" * (3 << 20))  # three 1 MiB chunks
    chunks = store.read("shard")
    assert next(chunks) == b"a" * (1 << 20)
    direct.put("shard", b"b" * (3 << 20))  # the rest of the old generation is gone
    with pytest.raises(ProviderUnavailable, match="overwritten while it was read"):
        b"".join(chunks)
    assert b"".join(store.read("shard")) == b"b" * (3 << 20)


def test_gcs_uploads_in_flight_draw_from_the_byte_budget_as_s3s_do(gcs_endpoint, monkeypatch):
    """16 x 16 MiB to GCS peaked at 308 MiB (#31): every streamed upload held its 8 MiB chunk
    outside the budget. With room for one upload's chunk, three streamed at once go one by one."""
    import threading

    from lifeboat_dr.kernel.crc32c import crc32c
    from lifeboat_dr.providers.storage import buffers
    from lifeboat_dr.providers.storage import gcs as gcsmod
    from lifeboat_dr.testing.emulators import new_gcs_bucket

    budget = buffers.ByteBudget(2 * gcsmod.UPLOAD_CHUNK)
    monkeypatch.setattr(gcsmod, "BUFFERS", budget, raising=False)  # gcs.py had none before #31
    store = GcsStore(new_gcs_bucket(gcs_endpoint), "ckpt", endpoint_url=gcs_endpoint)
    uploading, most, guard = 0, 0, threading.Lock()
    call = store._call

    def counted(op, key, fn, **kw):
        nonlocal uploading, most
        if op != "insert":
            return call(op, key, fn, **kw)
        with guard:
            uploading += 1
            most = max(most, uploading)
        try:
            return call(op, key, fn, **kw)
        finally:
            with guard:
                uploading -= 1

    monkeypatch.setattr(store, "_call", counted)
    size, block = 12 << 20, bytes(range(256)) * 4096  # a resumable upload: above UPLOAD_CHUNK

    def put(i: int) -> None:
        chunks = (bytes([i]) + block[1:] for _ in range(size // len(block)))
        store.put(f"o{i}", chunks, size=size)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        assert store.head(f"o{i}").crc32c == crc32c((bytes([i]) + block[1:]) * (size // len(block)))
    assert most == 1, f"{most} uploads held their chunks at once within a budget for one"
    assert budget.free == budget.total  # every reservation given back
