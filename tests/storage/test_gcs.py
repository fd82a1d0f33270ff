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
