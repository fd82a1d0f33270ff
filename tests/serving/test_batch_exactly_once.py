"""Batch inference resumed on the secondary from its certified progress: exactly-once output."""

import json

import pytest

from lifeboat_dr.core.certify import certify_replica
from lifeboat_dr.core.serving.batch import PROGRESS, audit_outputs, read_progress, run_batch, write_progress
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.testing.memory_store import MemoryStore

SHARDS = [f"shard-{i:03d}" for i in range(20)]


def records(shard: str) -> list[str]:
    return [f"{shard} document {j}" for j in range(5)]


class Model:
    def __init__(self):
        self.calls = 0

    def __call__(self, text: str) -> str:
        self.calls += 1
        return text.upper()


def replicate(src, dst, *, skip=(), corrupt=()):
    """Copy every object, as replication does; `skip` loses some, `corrupt` flips a byte."""
    for info in src.list():
        if info.key in skip:
            continue
        data = b"".join(src.read(info.key))
        if info.key in corrupt:
            data = data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]
        dst.put(info.key, data)


def crashed_primary(stop_after=12, every=3):
    """The primary ran 12 shards and died: checkpoints cover 12, 9, 6, 3 shards... but the
    checkpoint after shard 12 was never written (it died right after the output)."""
    primary = MemoryStore()
    run = run_batch(primary, SHARDS, records, Model(), every=every, stop_after=stop_after)
    assert run.processed == SHARDS[:stop_after]
    return primary, run


def resume(secondary, primary=None):
    report = certify_replica(secondary, primary, layout="manifest")
    assert report.certified is not None, report.rejected
    model = Model()
    run = run_batch(secondary, SHARDS, records, model, every=3, resume_from=report.certified.uri)
    return report, run, model


def test_resume_skips_exactly_the_certified_done_shards_and_outputs_every_record_once():
    primary, _ = crashed_primary()
    secondary = MemoryStore()
    replicate(primary, secondary)
    report, run, model = resume(secondary, primary)
    assert report.certified.uri.endswith("progress-000003")  # 9 shards: the last committed progress
    assert run.skipped == SHARDS[:9]
    assert run.processed == SHARDS[9:]  # shards 10-12 were done after the checkpoint: redone
    assert model.calls == 11 * 5
    assert audit_outputs(secondary, SHARDS, records) == []


def test_a_missing_or_corrupt_replica_output_is_redone_not_skipped():
    primary, _ = crashed_primary()
    secondary = MemoryStore()
    replicate(primary, secondary, skip={"outputs/shard-002.jsonl"}, corrupt={"outputs/shard-005.jsonl"})
    _, run, _ = resume(secondary)  # the source is down: the manifest alone certifies progress
    assert "shard-002" in run.processed and "shard-005" in run.processed
    assert run.skipped == [s for s in SHARDS[:9] if s not in ("shard-002", "shard-005")]
    assert audit_outputs(secondary, SHARDS, records) == []


def test_resuming_twice_processes_nothing_more():
    primary, _ = crashed_primary()
    secondary = MemoryStore()
    replicate(primary, secondary)
    resume(secondary)
    before = {i.key: i.crc32c for i in secondary.list("outputs/")}
    _, again, model = resume(secondary)
    assert again.processed == [] and model.calls == 0 and again.skipped == SHARDS
    assert {i.key: i.crc32c for i in secondary.list("outputs/")} == before


def test_a_crash_during_the_resume_then_another_resume_is_still_exactly_once():
    primary, _ = crashed_primary()
    secondary = MemoryStore()
    replicate(primary, secondary)
    report = certify_replica(secondary, None, layout="manifest")
    half = run_batch(
        secondary, SHARDS, records, Model(), every=3, resume_from=report.certified.uri, stop_after=4
    )
    assert len(half.processed) == 4
    _, run, _ = resume(secondary)
    assert set(run.processed) | set(run.skipped) == set(SHARDS)
    assert audit_outputs(secondary, SHARDS, records) == []


def test_a_forged_progress_file_is_rejected_and_the_previous_checkpoint_used():
    primary, _ = crashed_primary()
    secondary = MemoryStore()
    replicate(primary, secondary)
    key = f"progress-000003/{PROGRESS}"
    doc = json.loads(b"".join(secondary.read(key)))
    doc["done"]["shard-019"] = {"key": "outputs/shard-019.jsonl", "size": 1, "crc32c": "00000000"}
    secondary.put(key, json.dumps(doc).encode())  # claims a shard nobody did
    report, run, _ = resume(secondary)
    assert report.certified.uri.endswith("progress-000002")
    assert report.rejected[0].reason == "size mismatch" or report.rejected[0].reason == "crc mismatch"
    assert "shard-019" in run.processed
    assert audit_outputs(secondary, SHARDS, records) == []


def test_a_progress_file_pointing_outside_the_outputs_is_refused():
    store = MemoryStore()
    write_progress(store, 1, {})
    doc = {
        "format": "lifeboat-batch-progress/1",
        "done": {"shard-000": {"key": "../../etc/passwd", "size": 1, "crc32c": "0"}},
    }
    store.put(f"progress-000001/{PROGRESS}", json.dumps(doc).encode())
    with pytest.raises(ConfigError, match="points at '../../etc/passwd'"):
        read_progress(store, "progress-000001")


def test_the_audit_catches_a_missing_shard_a_repeated_record_and_a_stray_output():
    store = MemoryStore()
    run_batch(store, SHARDS[:3], records, Model())
    store.delete("outputs/shard-001.jsonl")
    line = b"".join(store.read("outputs/shard-002.jsonl")).decode().splitlines()[0]
    store.put(
        "outputs/shard-002.jsonl", b"".join(store.read("outputs/shard-002.jsonl")) + (line + "\n").encode()
    )
    store.put("outputs/shard-999.jsonl", b"")
    problems = audit_outputs(store, SHARDS[:3], records)
    assert problems == [
        "stray output outputs/shard-999.jsonl",
        "shard shard-001: no output",
        "shard shard-002: records missing [], repeated [0]",
    ]
