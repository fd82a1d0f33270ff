"""Discovery and completeness per layout, and the streaming manifest reader."""

import pytest

from lifeboat_dr.core.certify import certify_replica
from lifeboat_dr.core.checkpoints.layouts import discover, pointer_notes
from lifeboat_dr.core.checkpoints.manifest import Manifest, Shard, iter_manifest
from lifeboat_dr.core.checkpoints.protocols import incomplete_reason
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.standins.checkpoints import dcp_metadata, replicate, write_checkpoint
from lifeboat_dr.testing.memory_store import MemoryStore


def test_an_empty_store_has_no_checkpoints_and_no_layout():
    found = discover(MemoryStore(), "auto")
    assert (found.layout, found.checkpoints) == (None, [])


def test_a_store_of_unrecognisable_directories_asks_for_the_layout():
    store = MemoryStore("odd")
    store.put("logs/run.txt", b"x")
    with pytest.raises(ConfigError, match="memory://odd: no checkpoint layout recognised"):
        discover(store, "auto")


def test_dcp_ignores_directories_that_are_not_checkpoints():
    store = MemoryStore()
    write_checkpoint(store, "dcp", 5)
    store.put("tokenizer/vocab.json", b"{}")
    assert [d.name for d in discover(store, "dcp").checkpoints] == ["step_0000005"]


def test_megatron_torch_dist_checkpoint_is_complete():
    store = MemoryStore()
    store.put("iter_0000100/__0_0.distcp", b"x" * 10)
    for name in ("common.pt", "metadata.json"):
        store.put(f"iter_0000100/{name}", b"{}")
    store.put("iter_0000100/.metadata", dcp_metadata({"__0_0.distcp": 10}))
    store.put("latest_checkpointed_iteration.txt", b"100")
    found = discover(store, "auto")
    (ckpt,) = found.checkpoints
    assert found.layout == "megatron" and incomplete_reason(store, "megatron", ckpt, found.pointers) is None


def test_a_pointer_to_a_checkpoint_that_is_not_there_is_reported_not_followed():
    store = MemoryStore()
    write_checkpoint(store, "megatron", 100)
    store.put("latest_checkpointed_iteration.txt", b"200")
    notes = pointer_notes(discover(store, "megatron"))
    assert notes == [
        "pointer latest_checkpointed_iteration.txt names '200', which is not in the store (not trusted)"
    ]


def test_checkpoints_are_ordered_by_step_not_by_name():
    store = MemoryStore()
    for step in (900, 1000, 80):
        write_checkpoint(store, "deepspeed", step)
    assert [d.step for d in discover(store, "deepspeed").checkpoints] == [1000, 900, 80]


def test_past_the_cache_limit_certification_lists_each_side_once_and_still_finds_a_missing_shard():
    source, replica = MemoryStore(), MemoryStore()
    for step in (1, 2):
        replicate(source, replica, write_checkpoint(source, "dcp", step, shards=5))
    replica.delete("step_0000002/__3_0.distcp")
    found = discover(replica, "dcp", cache_limit=3)
    assert all(d.objects is None and d.spilled for d in found.checkpoints)
    for d in found.checkpoints:  # the spill gives back exactly what was listed, in order
        assert list(d.files(replica)) == list(replica.list(d.prefix))
    report = certify_replica(replica, source, layout="dcp", cache_limit=3)
    assert report.rejected[0].detail == "step_0000002: .metadata names __3_0.distcp, which is missing"
    assert report.certified.step == 1
    lists = {k: v for k, v in report.calls.items() if k.endswith(".list")}
    assert lists == {"replica.list": 1, "source.list": 1}  # past the limit too (reads: DCP .metadata)


def _manifest(n=50):
    shards = tuple(Shard(f"dir/shärd-{i:04d}.bin", i * 7, i * 2654435761 & 0xFFFFFFFF) for i in range(n))
    return Manifest.from_json(
        Manifest(step=42, created=__import__("datetime").datetime.now().astimezone(), shards=shards).to_json()
    )


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_streaming_manifest_reader_matches_the_whole_document(chunk):
    m = _manifest()
    data = m.to_json()
    header, shards = iter_manifest(data[i : i + chunk] for i in range(0, len(data), chunk))
    assert header == {"step": 42, "created": m.created}
    assert tuple(shards) == m.shards


def test_truncated_manifest_is_refused():
    data = _manifest().to_json()[:-40]
    _, shards = iter_manifest([data], where="step_42/lifeboat-manifest.json")
    with pytest.raises(ConfigError, match="step_42/lifeboat-manifest.json: not a valid Lifeboat manifest"):
        list(shards)


def test_foreign_manifest_format_is_refused():
    with pytest.raises(ConfigError, match="format is 'other/1'"):
        iter_manifest([b'{"format": "other/1", "step": 1, "created": "2026-01-01T00:00:00", "shards": []}'])


def test_manifest_with_shards_first_falls_back_to_the_whole_document():
    doc = b'{"shards": [{"path": "b", "size": 1, "crc32c": "00000001"}, {"path": "a", "size": 2, "crc32c": "00000002"}], "format": "lifeboat-manifest/1", "step": 3, "created": "2026-01-01T00:00:00+00:00"}'
    header, shards = iter_manifest([doc])
    assert header["step"] == 3 and [s.path for s in shards] == ["a", "b"]


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_receipt_lines_are_read_as_a_stream_across_chunk_boundaries(chunk):
    from lifeboat_dr.core.checkpoints.receipt import iter_receipt, write_receipt

    store = MemoryStore()
    write_checkpoint(store, "manifest", 7, shards=3)
    landed = write_receipt(store, "step_0000007")
    data = b"".join(store.read("step_0000007/lifeboat-receipt.jsonl"))
    assert (landed.key, landed.size) == ("step_0000007/lifeboat-receipt.jsonl", len(data))
    entries = list(iter_receipt(data[i : i + chunk] for i in range(0, len(data), chunk)))
    assert [e.path for e in entries] == [
        "lifeboat-manifest.json",
        "shard-000000.bin",
        "shard-000001.bin",
        "shard-000002.bin",
    ]
    assert entries[1].crc32c == store.head("step_0000007/shard-000000.bin").crc32c


def test_the_spill_gives_back_odd_keys_and_every_field_exactly_read_twice_or_in_parallel():
    """Keys a store may hold (a newline, a quote, non-BMP text), objects with and without a
    CRC32C or ETag: read back from the spill file as listed, pass after pass."""
    store = MemoryStore()
    names = ["a\nb.bin", 'q"uote.bin', "emoji-\U0001f600.bin", "tab\t.bin", "plain.bin"]
    for i, name in enumerate(names * 3):
        store.put(f"step_{i % 3:07d}/{i}-{name}", bytes([i]) * i)
    found = discover(store, "manifest", cache_limit=2)  # every step_N/ counts, committed or not
    assert len(found.checkpoints) == 3
    for d in found.checkpoints:
        assert d.objects is None and d.spilled
        listed = list(store.list(d.prefix))
        assert list(d.files(store)) == listed
        assert list(d.files(store)) == listed  # the same again: nothing consumed
