"""Certification reads like the incident: which checkpoint can we resume from, and why not
the newer ones."""

from datetime import timedelta

import pytest

from lifeboat_dr.core.certify import (
    CRC,
    INCOMPLETE,
    SIZE,
    UNVERIFIABLE,
    certified_checkpoints,
    certify_replica,
    newest_certified,
)
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint


def _train(source, replica, clock, layout, steps, replicated=None, **kw):
    """The job writes `steps` (10 minutes apart); replication copies `replicated` of them."""
    dirs = {}
    for step in steps:
        clock.advance(minutes=10)
        dirs[step] = write_checkpoint(source, layout, step, created=clock.now, **kw)
    for step in steps if replicated is None else replicated:
        replicate(source, replica, dirs[step])
    return dirs


def test_certifies_the_newest_replicated_checkpoint_and_measures_rpo(source, replica, clock):
    _train(source, replica, clock, "dcp", [100, 200, 300])
    written = clock.now
    clock.advance(minutes=7)
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 300
    assert report.certified.uri == "memory://secondary/step_0000300"
    assert report.certified.written_at == written
    assert report.rpo == timedelta(minutes=7)
    assert report.replication_lag == timedelta(0)
    assert report.rejected == [] and report.mode == "metadata"
    assert report.object_bytes_read == 0


def test_certify_rejects_replica_missing_a_dcp_shard(source, replica, clock):
    dirs = _train(source, replica, clock, "dcp", [100, 200])
    replica.delete(f"{dirs[200]}/__2_0.distcp")
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 100
    (rejected,) = report.rejected
    assert (rejected.step, rejected.reason) == (200, INCOMPLETE)
    assert rejected.detail == "step_0000200: .metadata names __2_0.distcp, which is missing"
    assert report.rpo == timedelta(minutes=10)


def test_certify_rejects_dcp_save_without_metadata_as_incomplete(source, replica, clock):
    _train(source, replica, clock, "dcp", [100])
    clock.advance(minutes=10)
    d = write_checkpoint(source, "dcp", 200, commit=False)
    replicate(source, replica, d)
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 100
    assert report.rejected[0].reason == INCOMPLETE
    assert ".metadata" in report.rejected[0].detail


def test_certify_rejects_a_shard_of_the_wrong_size(source, replica, clock):
    dirs = _train(source, replica, clock, "manifest", [100, 200])
    replica.put(f"{dirs[200]}/shard-000001.bin", b"truncated")
    report = certify_replica(replica, source, layout="manifest", at=clock.now)
    rejected = report.rejected[0]
    assert (rejected.step, rejected.reason) == (200, SIZE)
    assert rejected.detail == "size mismatch step_0000200/shard-000001.bin: replica 9 bytes, source 256 bytes"
    assert report.certified.step == 100


def test_certify_rejects_a_crc_mismatch_and_quotes_both_values(source, replica, clock):
    dirs = _train(source, replica, clock, "hf", [100, 200])
    key = f"{dirs[200]}/model-00002-of-00004.safetensors"
    good = b"".join(source.read(key))
    bad = good[:-1] + bytes([good[-1] ^ 1])  # a weight's byte: the header still adds up
    replica.corrupt(key, bad)  # a bad copy: same size, different bytes
    report = certify_replica(replica, source, layout="hf", at=clock.now)
    rejected = report.rejected[0]
    assert rejected.reason == CRC
    assert rejected.detail == (
        f"CRC32C mismatch {key}: replica {replica.head(key).crc32c:08x}, source {source.head(key).crc32c:08x}"
    )
    assert report.certified.step == 100


def test_deep_certification_catches_bit_rot_that_metadata_hides(source, replica, clock):
    dirs = _train(source, replica, clock, "dcp", [100])
    key = f"{dirs[100]}/__0_0.distcp"
    replica.corrupt(key, b"X" * 256, keep_crc=True)  # stored checksum no longer matches bytes
    assert certify_replica(replica, source, layout="dcp", at=clock.now).certified.step == 100
    deep = certify_replica(replica, source, layout="dcp", at=clock.now, deep=True)
    assert deep.certified is None and deep.rejected[0].reason == CRC
    assert deep.mode == "deep" and deep.object_bytes_read > 0


def test_hf_index_naming_a_missing_shard_is_an_incomplete_checkpoint(source, replica, clock):
    dirs = _train(source, replica, clock, "hf", [100, 200])
    replica.delete(f"{dirs[200]}/model-00003-of-00004.safetensors")
    source.delete(f"{dirs[200]}/model-00003-of-00004.safetensors")  # lost on both sides
    report = certify_replica(replica, source, layout="hf", at=clock.now)
    assert report.rejected[0].reason == INCOMPLETE
    assert report.rejected[0].detail == (
        "checkpoint-200: model.safetensors.index.json names model-00003-of-00004.safetensors, which is missing"
    )


def test_uncommitted_manifest_checkpoint_is_incomplete(source, replica, clock):
    _train(source, replica, clock, "manifest", [100])
    d = write_checkpoint(source, "manifest", 200, commit=False)
    replicate(source, replica, d)
    report = certify_replica(replica, source, layout="manifest", at=clock.now)
    assert report.rejected[0].reason == INCOMPLETE and "uncommitted" in report.rejected[0].detail
    assert report.certified.step == 100


def test_deepspeed_latest_pointer_is_never_trusted_alone(source, replica, clock):
    _train(source, replica, clock, "deepspeed", [100, 200])
    d = write_checkpoint(source, "deepspeed", 300, commit=False)
    source.put(f"{d}/mp_rank_00_model_states.pt", b"partial")
    replicate(source, replica, d)
    replica.delete(f"{d}/zero_pp_rank_1_mp_rank_00_optim_states.pt")
    replica.put("latest", d.encode())  # the pointer says 300
    report = certify_replica(replica, source, layout="auto", at=clock.now)
    assert report.layout == "deepspeed"
    assert report.rejected[0].step == 300 and report.rejected[0].reason == INCOMPLETE
    assert report.rejected[0].detail == (
        "global_step300: missing zero_pp_rank_1_mp_rank_00_optim_states.pt "
        "(the save has 4 data-parallel x 1 model-parallel ranks)"
    )
    assert report.certified.step == 200
    assert any("pointer latest names 'global_step300'" in n for n in report.notes)


def test_megatron_iterations_are_discovered_and_certified(source, replica, clock):
    _train(source, replica, clock, "megatron", [1000, 2000])
    report = certify_replica(replica, source, at=clock.now)
    assert (report.layout, report.certified.step) == ("megatron", 2000)


@pytest.mark.parametrize("layout", ["dcp", "deepspeed", "megatron", "hf", "manifest"])
def test_auto_detects_every_layout(source, replica, clock, layout):
    _train(source, replica, clock, layout, [100])
    report = certify_replica(replica, source, layout="auto", at=clock.now)
    assert (report.layout, report.certified.step) == (layout, 100)


def test_source_down_certifies_against_the_manifest_alone_and_says_so(source, replica, clock):
    _train(source, replica, clock, "dcp", [100, 200], manifest=True)
    source.outage = True
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.mode == "manifest-only-source-down"
    assert "store unreachable" in report.source_error
    assert report.certified.step == 200 and report.certified.written_at_basis == "manifest"
    assert report.replication_lag is None
    assert report.certified.verified_by == {"manifest": 5}  # 4 shards + .metadata


def test_source_down_without_a_manifest_certifies_nothing(source, replica, clock):
    _train(source, replica, clock, "dcp", [100])
    source.outage = True
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified is None
    assert report.rejected[0].reason == UNVERIFIABLE
    assert "source is unreachable" in report.rejected[0].detail


def test_source_down_still_catches_a_replica_that_disagrees_with_its_manifest(source, replica, clock):
    dirs = _train(source, replica, clock, "dcp", [100, 200], manifest=True)
    replica.corrupt(f"{dirs[200]}/__1_0.distcp", b"Y" * 256)
    source.outage = True
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.rejected[0].reason == CRC and "manifest" in report.rejected[0].detail
    assert report.certified.step == 100


def test_replication_lag_is_the_newest_source_checkpoint_not_yet_certified(source, replica, clock):
    _train(source, replica, clock, "dcp", [100, 200, 300], replicated=[100, 200])
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified.step == 200
    assert report.newest_source_step == 300
    assert report.replication_lag == timedelta(minutes=10)


def test_nothing_certified_when_every_checkpoint_fails(source, replica, clock):
    dirs = _train(source, replica, clock, "dcp", [100])
    replica.delete(f"{dirs[100]}/.metadata")
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    assert report.certified is None and report.rpo is None
    assert report.to_dict()["certified"] is None


def test_certified_checkpoints_are_listed_newest_first_for_retention_and_rollback(source, replica, clock):
    dirs = _train(source, replica, clock, "dcp", [100, 200, 300, 400])
    replica.delete(f"{dirs[300]}/__0_0.distcp")
    assert [c.step for c in certified_checkpoints(replica, source, layout="dcp")] == [400, 200, 100]
    assert newest_certified(replica, source, layout="dcp").step == 400


def test_metadata_certification_lists_each_side_once_and_reads_no_bytes(source, replica, clock):
    _train(source, replica, clock, "dcp", [100, 200], manifest=True)
    report = certify_replica(replica, source, layout="dcp", at=clock.now)
    # both listings carry CRC32C: the manifest is not even fetched; only the DCP .metadata
    # of each side is read (the commit protocol: which storage files it names)
    assert report.calls == {"replica.list": 1, "replica.read": 1, "source.list": 1, "source.read": 1}
    metadata = source.head("step_0000200/.metadata").size
    assert report.object_bytes_read == 0 and report.metadata_bytes_read == 2 * metadata
    assert report.certified.written_at_basis == "source"


def test_rollback_certifies_the_newest_checkpoint_older_than_the_one_that_failed(source, replica, clock):
    _train(source, replica, clock, "dcp", [100, 200, 300])
    report = certify_replica(replica, source, layout="dcp", at=clock.now, older_than=300)
    assert report.certified.step == 200 and report.rpo == timedelta(minutes=10)


def test_plain_files_a_training_job_wrote_are_verified_by_streaming_against_its_manifest(tmp_path):
    import shutil

    from lifeboat_dr.core.checkpoints.manifest import write_manifest
    from lifeboat_dr.providers.storage.local import LocalStore

    ckpt = tmp_path / "primary" / "step_500"
    ckpt.mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(b"m" * 3000)
    (ckpt / "optim.bin").write_bytes(b"o" * 5000)
    write_manifest(ckpt, 500)
    shutil.copytree(tmp_path / "primary", tmp_path / "replica")  # replicated by a plain copy: no checksums
    replica = LocalStore(tmp_path / "replica")
    report = certify_replica(replica, None, layout="manifest")
    assert report.certified.step == 500 and report.mode == "streaming"
    assert report.certified.verified_by == {"streamed": 2}
    assert report.object_bytes_read == 8000
    (tmp_path / "replica" / "step_500" / "optim.bin").write_bytes(b"x" * 5000)
    assert certify_replica(replica, None, layout="manifest").rejected[0].reason == CRC


def test_a_hand_made_manifest_out_of_order_is_unverifiable_not_half_checked(replica):
    replica.put("step_1/a.bin", b"a")
    replica.put("step_1/b.bin", b"b")
    replica.put(
        "step_1/lifeboat-manifest.json",
        b'{"format": "lifeboat-manifest/1", "step": 1, "created": "2026-11-30T08:00:00+00:00", "shards": ['
        b'{"path": "b.bin", "size": 1, "crc32c": "00000000"}, {"path": "a.bin", "size": 1, "crc32c": "00000000"}]}',
    )
    report = certify_replica(replica, None, layout="manifest")
    assert report.certified is None
    assert report.rejected[0].reason == UNVERIFIABLE and "not sorted" in report.rejected[0].detail
