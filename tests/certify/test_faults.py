"""Faults certification must name right: a replica failing mid-stream is the replica's, an
unreadable manifest rejects its own step only, hostile metadata is refused without running."""

from __future__ import annotations

import os
import pickle

import pytest

from lifeboat_dr.core.certify import BAD_METADATA, INCOMPLETE, StoreUnavailable, certify_replica
from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.transfer import RetryPolicy
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from lifeboat_dr.testing.memory_store import MemoryStore


class FailsMidStream(MemoryStore):
    """A replica whose reads of `key` yield the first chunk, then the connection drops."""

    def __init__(self, *a, key: str = "", **kw):
        super().__init__(*a, **kw)
        self.key = key

    def read(self, key, start=0, end=None):
        for i, chunk in enumerate(super().read(key, start, end)):
            yield chunk
            if key == self.key and i == 0:
                raise ProviderUnavailable(f"{self.uri}/{key}: connection reset")
        if key == self.key:
            raise ProviderUnavailable(f"{self.uri}/{key}: connection reset")


def test_a_replica_failing_mid_stream_is_named_as_the_replica_not_the_source(source):
    d = write_checkpoint(source, "manifest", 100)
    replica = FailsMidStream("secondary", key=f"{d}/shard-000001.bin")
    replicate(source, replica, d)
    with pytest.raises(StoreUnavailable) as caught:
        certify_replica(replica, source, layout="manifest", deep=True)
    assert caught.value.side == "replica"
    assert str(caught.value).startswith("replica memory://secondary failed: ")


def test_a_source_failing_mid_stream_falls_back_to_the_manifest(replica):
    source = FailsMidStream("primary")
    d = write_checkpoint(source, "manifest", 100)
    replicate(source, replica, d)
    source.key = f"{d}/shard-000001.bin"
    report = certify_replica(replica, source, layout="manifest", deep=True)
    assert report.mode == "manifest-only-source-down" and report.certified.step == 100
    assert report.source_error.startswith("source memory://primary failed: ")


@pytest.mark.parametrize("body", [b"", b'{"format": "lifeboat-manifest/1", "step": 2', b"\xff\xfe"])
def test_an_unreadable_manifest_rejects_its_step_and_certification_moves_on(source, replica, body):
    for step in (100, 200):
        replicate(source, replica, write_checkpoint(source, "manifest", step))
    replica.put("step_0000200/lifeboat-manifest.json", body)
    source.outage = True  # the manifest is all there is
    report = certify_replica(replica, source, layout="manifest")
    assert report.certified.step == 100
    (rejected,) = report.rejected
    assert rejected.reason == BAD_METADATA
    assert "step_0000200" in rejected.detail and "not a valid Lifeboat manifest" in rejected.detail


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/lifeboat-pwned",))


def test_a_hostile_dcp_metadata_is_refused_and_never_run(source, replica):
    for step in (100, 200):
        replicate(source, replica, write_checkpoint(source, "dcp", step))
    replica.put("step_0000200/.metadata", pickle.dumps(Evil()))
    report = certify_replica(replica, source, layout="dcp")
    assert not os.path.exists("/tmp/lifeboat-pwned")
    assert report.certified.step == 100
    assert report.rejected[0].reason == INCOMPLETE
    assert "refused global posix.system" in report.rejected[0].detail


def test_a_dcp_shard_shorter_than_its_metadata_places_is_truncated(source, replica):
    d = write_checkpoint(source, "dcp", 100)
    source.put(f"{d}/__1_0.distcp", b"x" * 100)  # the rank died mid-write; .metadata says 256
    replicate(source, replica, d)
    report = certify_replica(replica, source, layout="dcp")
    assert report.certified is None
    assert report.rejected[0].detail == (
        "step_0000100: .metadata places 256 bytes in __1_0.distcp, which holds 100: truncated"
    )


def test_deepspeed_pointer_is_replicated_last_and_only_when_its_step_landed(source, replica):
    for step in (100, 200):
        write_checkpoint(source, "deepspeed", step)
    writes = []
    put = replica.put
    replica.put = lambda key, data, **kw: (writes.append(key), put(key, data, **kw))[1]
    ckpts = [StoredCheckpoint("global_step100", 100), StoredCheckpoint("global_step200", 200)]
    report = replicate_checkpoints(
        source, replica, ckpts, rpo_target=__import__("datetime").timedelta(hours=1)
    )
    assert writes[-1] == "latest" and report.pointers == ["latest"]
    assert b"".join(replica.read("latest")) == b"global_step200"
    assert certify_replica(replica, source, layout="deepspeed").certified.step == 200

    write_checkpoint(source, "deepspeed", 300)  # the pointer moves to 300, whose copy fails
    source.outage = False
    broken = [StoredCheckpoint("global_step300", 300)]
    replica.outage = True
    failed = replicate_checkpoints(
        source,
        replica,
        broken,
        rpo_target=__import__("datetime").timedelta(hours=1),
        retry=RetryPolicy(sleep=lambda s: None),  # every attempt, none of the backoff's waiting
    )
    replica.outage = False
    assert "global_step300" in failed.failed and failed.pointers == []
    assert b"".join(replica.read("latest")) == b"global_step200"


def test_a_pointer_naming_a_step_that_did_not_replicate_names_the_newest_that_did(source, replica):
    from datetime import timedelta

    for step in (100, 200):
        write_checkpoint(source, "megatron", step)
    only_100 = [StoredCheckpoint("iter_0000100", 100)]
    report = replicate_checkpoints(source, replica, only_100, rpo_target=timedelta(1))
    assert report.pointers == ["latest_checkpointed_iteration.txt"]
    assert b"".join(replica.read("latest_checkpointed_iteration.txt")) == b"100"
    assert certify_replica(replica, source, layout="megatron").certified.step == 100
    replicate_checkpoints(source, replica, [], rpo_target=timedelta(1))  # never moved back
    assert b"".join(replica.read("latest_checkpointed_iteration.txt")) == b"100"


def test_no_pointer_at_all_on_the_replica_commits_nothing(source, replica):
    d = write_checkpoint(source, "megatron", 100)
    for info in source.list(f"{d}/"):
        replica.put(info.key, b"".join(source.read(info.key)))
    found = certify_replica(replica, source, layout="megatron")
    assert found.certified is None
    assert "no latest_checkpointed_iteration.txt pointer" in found.rejected[0].detail
