"""The Store contract: every test any backend must pass.

A backend's test class inherits `StoreContract` and says which backend it is (`BACKEND`); the
fixtures `store` (a fresh, empty store) and `make_store(backend)` come from
tests/storage/conftest.py or the backend's own test module. A backend served by a peer
(moto, SeaweedFS, fake-gcs-server, the GCS emulator) marks its class `integration`.
"""

from datetime import UTC

import pytest

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed

# What each GCS peer ignores that real GCS enforces (tests/storage/test_gcs_preconditions.py
# asks them on the wire). Such a test runs there and must fail: strict xfail, so we hear when
# a peer learns it. MemoryStore keeps the promise in its place.
IGNORES = {
    ("gcs", "upload"): "gcp-storage-emulator ignores ifGenerationMatch",
    ("gcs", "rewrite"): "gcp-storage-emulator ignores ifGenerationMatch",
    ("gcs", "resumable"): "gcp-storage-emulator ignores ifGenerationMatch",
    ("fake-gcs", "rewrite"): "fake-gcs-server 1.54 ignores ifGenerationMatch on rewrite",
    (
        "fake-gcs",
        "resumable",
    ): "fake-gcs-server 1.54 ignores ifGenerationMatch on resumable uploads (1.55 enforces it)",
}


def _needs_preconditions(request, backend, on: str = "upload"):
    """The test needs the store to enforce a precondition `on` an upload, a resumable upload
    (a stream of unknown size) or a rewrite (a server-side copy)."""
    if (backend, on) in IGNORES:
        reason = f"{IGNORES[backend, on]}; real GCS honours it and MemoryStore stands in for it"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


class StoreContract:
    BACKEND: str

    @pytest.fixture
    def backend(self):
        return self.BACKEND

    def test_put_then_head_reports_size_version_and_full_object_crc32c(self, store):
        data = b"weights" * 1000
        written = store.put("step_1/shard-0.bin", data)
        info = store.head("step_1/shard-0.bin")
        assert (info.key, info.size, info.crc32c) == ("step_1/shard-0.bin", len(data), crc32c(data))
        assert info.version and info.version == written.version
        assert info.updated.tzinfo is not None and info.updated.utcoffset() == UTC.utcoffset(None)

    def test_list_returns_every_object_under_a_prefix_sorted_with_sizes(self, store):
        for key in ["b/2", "a/1", "a/0", "c"]:
            store.put(key, key.encode() * 3)
        listed = list(store.list("a/"))
        assert [i.key for i in listed] == ["a/0", "a/1"]
        assert [i.size for i in listed] == [9, 9]
        assert [i.key for i in store.list()] == ["a/0", "a/1", "b/2", "c"]

    def test_list_reports_crc32c_exactly_when_the_backend_says_it_can(self, store):
        store.put("x", b"hello")
        (info,) = store.list()
        if store.capabilities.crc32c_in_list:
            assert info.crc32c == crc32c(b"hello")
        else:
            assert info.crc32c is None  # S3: list has no checksum values; HEAD has

    def test_list_follows_every_page(self, store, backend):
        if backend in ("local", "memory"):
            pytest.skip("no pages: the listing is one call")
        store.list_page_size = 2
        keys = [f"s/{i:02d}" for i in range(5)]
        for key in keys:
            store.put(key, b"x")
        assert [i.key for i in store.list("s/")] == keys
        if backend in ("s3", "seaweedfs"):
            assert store.calls["ListObjectsV2"] == 3
        if backend == "fake-gcs":  # pages as GCS does (gcp-storage-emulator ignores maxResults)
            assert store.calls["list"] == 3

    def test_read_streams_whole_and_ranged_bytes(self, store):
        data = bytes(range(256)) * 20
        store.put("obj", data)
        assert b"".join(store.read("obj")) == data
        assert b"".join(store.read("obj", 10, 300)) == data[10:300]
        assert b"".join(store.read("obj", 5000)) == data[5000:]
        assert b"".join(store.read("obj", len(data))) == b""

    def test_streaming_put_of_chunks_stores_the_crc32c_of_the_whole(self, store):
        chunks = [b"a" * 1000, b"b" * 3000, b"c"]
        store.put("streamed", iter(chunks))
        info = store.head("streamed")
        assert info.size == 4001
        assert info.crc32c == crc32c(b"".join(chunks))

    def test_missing_object_raises_not_found(self, store):
        with pytest.raises(NotFound):
            store.head("nope")
        with pytest.raises(NotFound):
            b"".join(store.read("nope"))

    def test_delete_removes_and_deleting_twice_is_fine(self, store):
        store.put("gone", b"1")
        store.delete("gone")
        store.delete("gone")
        with pytest.raises(NotFound):
            store.head("gone")
        assert list(store.list()) == []

    def test_create_only_write_has_exactly_one_winner(self, store, backend, request):
        _needs_preconditions(request, backend)
        store.put("lease", b"epoch-1", if_none_match=True)
        with pytest.raises(PreconditionFailed):
            store.put("lease", b"epoch-2", if_none_match=True)
        assert b"".join(store.read("lease")) == b"epoch-1"

    def test_a_streamed_create_only_write_of_unknown_size_never_lands_over_an_object(
        self, store, backend, request
    ):
        """A copy streams a shard it cannot size up front (a resumable upload on GCS): the
        object a resumed job wrote there meanwhile keeps its bytes."""
        _needs_preconditions(request, backend, on="resumable")
        store.put("step_20/shard", b"active lineage")
        with pytest.raises(PreconditionFailed):
            store.put("step_20/shard", iter([b"old ", b"lineage"]), if_none_match=True)
        assert b"".join(store.read("step_20/shard")) == b"active lineage"

    def test_if_match_write_refuses_a_stale_version(self, store, backend, request):
        _needs_preconditions(request, backend)
        first = store.put("lease", b"epoch-1")
        second = store.put("lease", b"epoch-2", if_match=first.version)
        with pytest.raises(PreconditionFailed):
            store.put("lease", b"epoch-3", if_match=first.version)
        assert store.head("lease").version == second.version
        assert b"".join(store.read("lease")) == b"epoch-2"

    def test_server_copy_within_the_backend_keeps_the_crc32c(self, store, make_store, backend):
        other = make_store(backend, prefix="replica")
        store.put("shard", b"z" * 5000)
        copied = other.server_copy(store, "shard", "copy/shard")
        assert copied is not None
        assert copied.crc32c == other.head("copy/shard").crc32c == crc32c(b"z" * 5000)
        assert b"".join(other.read("copy/shard")) == b"z" * 5000

    def test_a_create_only_server_copy_never_lands_over_an_object_written_since(
        self, store, make_store, backend, request
    ):
        """The copy planned an empty destination; another writer (a failover's resumed job)
        wrote there first: the copy loses, the writer's bytes stay."""
        _needs_preconditions(request, backend, on="rewrite")
        other = make_store(backend, prefix="replica")
        store.put("step_20/shard", b"old lineage" * 100)
        other.put("step_20/shard", b"active lineage")
        with pytest.raises(PreconditionFailed):
            other.server_copy(store, "step_20/shard", "step_20/shard", if_none_match=True)
        assert b"".join(other.read("step_20/shard")) == b"active lineage"
        fresh = other.server_copy(store, "step_20/shard", "step_21/shard", if_none_match=True)
        assert fresh.crc32c == crc32c(b"old lineage" * 100)

    def test_an_if_match_server_copy_replaces_only_the_version_it_planned_against(
        self, store, make_store, backend, request
    ):
        _needs_preconditions(request, backend, on="rewrite")
        other = make_store(backend, prefix="replica")
        store.put("shard", b"source" * 100)
        planned = other.put("shard", b"stale replica")
        since = other.put("shard", b"written since the plan")
        with pytest.raises(PreconditionFailed):
            other.server_copy(store, "shard", "shard", if_match=planned.version)
        assert b"".join(other.read("shard")) == b"written since the plan"
        copied = other.server_copy(store, "shard", "shard", if_match=since.version)
        assert copied.version == other.head("shard").version != since.version
        assert b"".join(other.read("shard")) == b"source" * 100

    def test_server_copy_from_another_service_declines(self, store, make_store, backend):
        foreign = make_store("memory" if backend != "memory" else "local")
        foreign.put("shard", b"q")
        assert store.server_copy(foreign, "shard", "shard") is None

    def test_a_write_answers_with_what_head_reports(self, store):
        data = b"optimizer" * 5000
        written = store.put("step_1/shard-0.bin", iter([data[:30000], data[30000:]]), size=len(data))
        info = store.head("step_1/shard-0.bin")
        assert (written.size, written.crc32c, written.version) == (info.size, info.crc32c, info.version)
        assert written.crc32c == crc32c(data)

    @pytest.mark.parametrize("as_stream", [True, False], ids=["stream", "bytes"])
    def test_bytes_that_differ_from_the_crc32c_they_must_have_are_never_committed(
        self, store, backend, as_stream
    ):
        from lifeboat_dr.kernel.errors import ChecksumMismatch

        data = b"weights" * 3000
        if not as_stream and backend == "s3":
            pytest.skip("bytes with the caller's CRC32C are verified by S3 itself (BadDigest); moto does not")
        body = iter([data[:5000], data[5000:]]) if as_stream else data
        with pytest.raises(ChecksumMismatch):
            store.put("step_1/shard-0.bin", body, crc32c=crc32c(data) ^ 1, size=len(data))
        with pytest.raises(NotFound):
            store.head("step_1/shard-0.bin")

    # -- odd and hostile keys: a key names one object under the root, and no other --------

    @pytest.mark.parametrize(
        "key",
        [
            "step_20/../step_10/shard-0.bin",  # another step's shard on a file:// store
            "step_20/../../outside.bin",  # out of the store root
            "/step_10/shard-0.bin",  # a leading slash
            "step_20//shard-0.bin",  # an empty segment: the same file as step_20/shard-0.bin
            "step_20/./shard-0.bin",
            "step_20/",
            "",
        ],
    )
    def test_a_key_that_would_leave_its_folder_is_refused_by_every_primitive(self, store, key):
        store.put("step_10/shard-0.bin", b"step 10")
        store.put("step_20/shard-0.bin", b"step 20")
        calls = {
            "put": lambda: store.put(key, b"evil"),
            "head": lambda: store.head(key),
            "read": lambda: b"".join(store.read(key)),
            "delete": lambda: store.delete(key),
            "server_copy": lambda: store.server_copy(store, "step_10/shard-0.bin", key),
        }
        for name, call in calls.items():
            with pytest.raises(ConfigError, match="refused") as refused:
                call()
            assert "\n" not in str(refused.value), name  # one line
        assert [(i.key, b"".join(store.read(i.key))) for i in store.list()] == [
            ("step_10/shard-0.bin", b"step 10"),
            ("step_20/shard-0.bin", b"step 20"),
        ]

    def test_a_250_byte_file_name_keeps_its_crc32c_and_every_listing_still_works(self, store):
        key = "step_1/" + "n" * 246 + ".bin"  # the name alone is 250 bytes
        data = b"w" * 1000
        written = store.put(key, data)
        assert store.head(key).crc32c == crc32c(data)
        assert [(i.key, i.size) for i in store.list()] == [(key, 1000)]
        store.put(key, data * 2, if_match=written.version)
        assert store.head(key).crc32c == crc32c(data * 2)
        store.delete(key)
        assert list(store.list()) == []

    def test_a_long_key_in_a_deep_folder_takes_create_only_writes(self, store):
        key = "/".join(["d" * 200, "e" * 200, "f" * 200]) + "/marker.json"
        store.put(key, b"{}", if_none_match=True)
        assert [i.key for i in store.list()] == [key]
        assert store.head(key).crc32c == crc32c(b"{}")
