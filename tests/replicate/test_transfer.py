"""The copy engine against local stores and misbehaving proxies: resume, throttling,
corruption in transit, and the commit marker written last."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, Manifest
from lifeboat_dr.core.transfer import TransferIncomplete, copy_prefix
from lifeboat_dr.kernel.crc32c import crc32c_of
from lifeboat_dr.kernel.errors import NotFound

CKPT = "run/step-100"
SHARDS = [f"{CKPT}/shard-{i:03d}.bin" for i in range(4)]


@pytest.fixture(params=["whole", "streamed"])
def object_path(request, monkeypatch):
    """Run a test over both put paths: small objects gathered whole, large ones streamed."""
    if request.param == "streamed":
        monkeypatch.setattr("lifeboat_dr.core.transfer.WHOLE_OBJECT_LIMIT", 0)
    return request.param


def body(store, key: str) -> bytes:
    return b"".join(store.read(key))


def assert_replica_matches(primary, secondary, prefix: str = CKPT) -> None:
    src = {i.key: i for i in primary.list(prefix + "/")}
    dst = {i.key: i for i in secondary.list(prefix + "/")}
    assert sorted(src) == sorted(dst)
    for key in src:
        assert body(secondary, key) == body(primary, key), key


def test_a_checkpoint_is_copied_whole_and_a_rerun_copies_nothing(
    primary, secondary, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    first = copy_prefix(primary, faults.Proxy(secondary), CKPT, CKPT)
    assert sorted(first.copied) == sorted([MANIFEST_NAME, *(k.rsplit("/", 1)[1] for k in SHARDS)])
    assert first.markers == [MANIFEST_NAME] and not first.hashed
    assert_replica_matches(primary, secondary)

    again = copy_prefix(primary, faults.Proxy(secondary), CKPT, CKPT)
    assert again.copied == [] and again.bytes_copied == 0
    assert len(again.skipped) == 5


def test_within_one_store_kind_the_copy_is_server_side(primary, secondary, faults, write_checkpoint):
    write_checkpoint(primary, CKPT, 100)
    report = copy_prefix(primary, secondary, CKPT, "replica/step-100")
    # the data server-side; the marker by a conditional PUT (a server copy carries no precondition)
    assert report.copied == [MANIFEST_NAME] and len(report.server_copied) == 4
    for key in SHARDS:
        assert secondary.head(key.replace("run/", "replica/")).crc32c == primary.head(key).crc32c


def test_a_copy_killed_after_two_shards_resumes_without_copying_them_again(
    object_path, primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)

    class DiesAfterTwo(faults.Proxy):
        def put(self, key, data, **kw):
            if len(self.calls) == 2:
                raise SystemExit("killed")  # not an error the engine may swallow
            return super().put(key, data, **kw)

    with pytest.raises(SystemExit):
        copy_prefix(primary, DiesAfterTwo(secondary), CKPT, CKPT, concurrency=1, retry=no_sleep)
    done = {i.key for i in secondary.list(CKPT + "/")}
    assert len(done) == 2 and f"{CKPT}/{MANIFEST_NAME}" not in done

    rerun = faults.Proxy(secondary)
    report = copy_prefix(primary, rerun, CKPT, CKPT, retry=no_sleep)
    assert sorted(k for _, k in rerun.calls) == sorted(set(SHARDS) - done | {f"{CKPT}/{MANIFEST_NAME}"})
    assert len(report.skipped) == 2
    assert_replica_matches(primary, secondary)


def test_throttled_writes_are_retried_until_every_object_lands(
    object_path, primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    throttled = faults.Throttling(secondary, every=2)
    report = copy_prefix(primary, throttled, CKPT, CKPT, retry=no_sleep)
    assert throttled.throttled >= 2 and report.retries == throttled.throttled
    assert_replica_matches(primary, secondary)


def test_a_destination_that_keeps_throttling_leaves_the_replica_uncommitted(
    primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    with pytest.raises(TransferIncomplete) as raised:
        copy_prefix(primary, faults.Throttling(secondary, every=1), CKPT, CKPT, retry=no_sleep)
    assert len(raised.value.report.failed) == 4 and "503 SlowDown" in str(raised.value)
    with pytest.raises(NotFound):
        secondary.head(f"{CKPT}/{MANIFEST_NAME}")


def test_a_byte_flipped_in_transit_is_detected_and_copied_again(
    object_path, primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    flaky = faults.Flipping(primary, {SHARDS[1]}, times=1)
    report = copy_prefix(flaky, secondary, CKPT, CKPT, retry=no_sleep)
    assert report.retries == 1
    assert_replica_matches(primary, secondary)


def test_a_shard_corrupted_on_every_read_is_never_accepted(
    object_path, primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    flaky = faults.Flipping(primary, {SHARDS[2]}, times=100)
    with pytest.raises(TransferIncomplete) as raised:
        copy_prefix(flaky, secondary, CKPT, CKPT, retry=no_sleep)
    assert "ChecksumMismatch" in raised.value.report.failed["shard-002.bin"]
    with pytest.raises(NotFound):
        secondary.head(SHARDS[2])
    with pytest.raises(NotFound):
        secondary.head(f"{CKPT}/{MANIFEST_NAME}")


def test_a_byte_flipped_on_the_way_into_the_destination_is_detected(
    object_path, primary, secondary, no_sleep, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)

    class FlipsOnWrite(faults.Proxy):
        flips = 1

        def put(self, key, data, **kw):
            if key == SHARDS[0] and self.flips:
                self.flips -= 1
                data = data if isinstance(data, bytes) else b"".join(data)
                data = bytes([data[0] ^ 0x80]) + data[1:]
            return super().put(key, data, **kw)

    report = copy_prefix(primary, FlipsOnWrite(secondary), CKPT, CKPT, retry=no_sleep)
    assert report.retries == 1
    assert_replica_matches(primary, secondary)


def test_a_server_side_copy_that_lands_wrong_is_deleted_and_retried_create_only(
    primary, secondary, no_sleep, faults, write_checkpoint
):
    """The copy planned to replace a stale replica's shard (if-match on its version); the
    provider's copy answers with another CRC32C, so it is deleted: the retry must then be
    create-only, or it would lose its own precondition against nothing."""
    write_checkpoint(primary, CKPT, 100)
    secondary.put(SHARDS[0], b"a stale replica's shard")
    stale = secondary.head(SHARDS[0]).version

    class LandsWrongOnce(faults.Proxy):
        conditions: list[dict] = []

        def server_copy(self, source, src_key, dst_key, **cond):
            info = self.inner.server_copy(source, src_key, dst_key, **cond)
            if dst_key == SHARDS[0]:
                self.conditions.append(cond)
                if len(self.conditions) == 1:
                    return replace(info, crc32c=info.crc32c ^ 1)
            return info

    watched = LandsWrongOnce(secondary)
    report = copy_prefix(primary, watched, CKPT, CKPT, retry=no_sleep)
    assert watched.conditions == [{"if_match": stale}, {"if_none_match": True}]
    assert report.retries == 1 and SHARDS[0].removeprefix(f"{CKPT}/") in report.server_copied
    assert_replica_matches(primary, secondary)


def _assert_never_complete_but_partial(secondary) -> None:
    """What a reader of the secondary sees: if the manifest is there, so is every shard, whole."""
    try:
        manifest = Manifest.from_json(body(secondary, f"{CKPT}/{MANIFEST_NAME}"))
    except NotFound:
        return
    for shard in manifest.shards:
        data = body(secondary, f"{CKPT}/{shard.path}")
        assert (len(data), crc32c_of([data])) == (shard.size, shard.crc32c), shard.path


def test_the_manifest_lands_last_so_a_reader_never_sees_a_partial_checkpoint(
    primary, secondary, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    watched = faults.Checking(secondary, lambda: _assert_never_complete_but_partial(secondary))
    copy_prefix(primary, watched, CKPT, CKPT, concurrency=4)
    assert watched.calls[-1] == ("put", f"{CKPT}/{MANIFEST_NAME}")


def test_a_stale_replica_loses_its_manifest_before_its_shards_change(
    primary, secondary, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    copy_prefix(primary, secondary, CKPT, CKPT)
    primary.delete(f"{CKPT}/{MANIFEST_NAME}")
    primary.put(SHARDS[3], b"rewritten after a restart")
    write_checkpoint(primary, CKPT, 100, shards=0)  # re-commit: manifest over the new shard

    watched = faults.Checking(secondary, lambda: _assert_never_complete_but_partial(secondary))
    report = copy_prefix(primary, watched, CKPT, CKPT)
    assert report.copied == ["lifeboat-manifest.json", "shard-003.bin"]
    assert watched.calls[0] == ("delete", f"{CKPT}/{MANIFEST_NAME}")
    assert_replica_matches(primary, secondary)


COPIER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from lifeboat_dr.core.transfer import copy_prefix
from lifeboat_dr.providers.storage.local import LocalStore

class Slow(LocalStore):
    capabilities = LocalStore.capabilities.__class__(True, True, True, False)  # no server copy
    def put(self, key, data, **kw):
        info = super().put(key, data, **kw)
        time.sleep(0.3)
        return info

copy_prefix(LocalStore(sys.argv[2]), Slow(sys.argv[3]), "run/step-100", "run/step-100", concurrency=1)
"""


@pytest.mark.processes
def test_a_copier_sigkilled_mid_copy_is_finished_by_a_rerun_that_skips_landed_shards(
    primary, secondary, faults, write_checkpoint
):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    write_checkpoint(primary, CKPT, 100, shards=8)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", COPIER, str(root), str(primary.root), str(secondary.root)],
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while len(list(secondary.list(CKPT + "/"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()

    # an object killed between its rename and its CRC sidecar is not "landed": it is copied again
    landed = {i.key for i in secondary.list(CKPT + "/") if i.crc32c is not None}
    assert 3 <= len(landed) < 8 and f"{CKPT}/{MANIFEST_NAME}" not in landed
    rerun = faults.Proxy(secondary)
    report = copy_prefix(primary, rerun, CKPT, CKPT)
    assert {k for _, k in rerun.calls}.isdisjoint(landed)
    assert len(report.skipped) == len(landed) and report.markers == [MANIFEST_NAME]
    assert_replica_matches(primary, secondary)


def test_a_source_missing_a_shard_its_manifest_names_is_not_committed_on_the_replica(
    primary, secondary, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    primary.delete(SHARDS[2])
    with pytest.raises(TransferIncomplete) as raised:
        copy_prefix(primary, secondary, CKPT, CKPT)
    assert "missing from the source" in raised.value.report.failed["shard-002.bin"]
    with pytest.raises(NotFound):
        secondary.head(f"{CKPT}/{MANIFEST_NAME}")


def test_dry_run_plans_the_copy_and_writes_nothing(primary, secondary, faults, write_checkpoint):
    write_checkpoint(primary, CKPT, 100)
    copy_prefix(primary, secondary, CKPT, CKPT)
    primary.delete(f"{CKPT}/{MANIFEST_NAME}")
    primary.put(SHARDS[0], b"new bytes")
    write_checkpoint(primary, CKPT, 100, shards=0)
    watched = faults.Proxy(secondary)
    report = copy_prefix(primary, watched, CKPT, CKPT, dry_run=True)
    assert report.planned == [MANIFEST_NAME, "shard-000.bin"] and watched.calls == []


class Recorder:
    def __init__(self):
        self.total, self.moved = None, 0

    def planned(self, objects: int, nbytes: int) -> None:
        self.total = nbytes

    def advance(self, nbytes: int) -> None:
        self.moved += nbytes


def test_progress_counts_each_byte_once_even_when_attempts_are_retried(
    object_path, primary, secondary, faults, write_checkpoint, no_sleep
):
    write_checkpoint(primary, CKPT, 100)
    progress = Recorder()
    report = copy_prefix(
        primary, faults.Throttling(secondary, every=2), CKPT, CKPT, progress=progress, retry=no_sleep
    )
    assert report.retries >= 2
    assert progress.total == progress.moved == report.bytes_copied == sum(i.size for i in primary.list(CKPT))


def test_a_shard_above_the_whole_object_limit_streams_in_bounded_chunks(
    primary, secondary, faults, write_checkpoint, monkeypatch
):
    monkeypatch.setattr("lifeboat_dr.core.transfer.WHOLE_OBJECT_LIMIT", 1 << 20)
    write_checkpoint(primary, CKPT, 100, shards=1, size=3 << 20)
    chunks: list[int] = []

    class Measuring(faults.Proxy):
        def put(self, key, data, **kw):
            if key.endswith(".bin"):
                assert not isinstance(data, bytes)  # an iterator: never the whole object
                data = (chunks.append(len(c)) or c for c in data)
            return super().put(key, data, **kw)

    copy_prefix(primary, Measuring(secondary), CKPT, CKPT)
    assert sum(chunks) == 3 << 20 and max(chunks) <= 1 << 20
    assert_replica_matches(primary, secondary)


def test_a_source_without_checksums_is_hashed_first_so_a_flipped_byte_is_still_caught(
    object_path, primary, secondary, faults, write_checkpoint, no_sleep
):
    # S3 objects written with the default CRC64NVME and no manifest: no CRC32C by metadata
    for i in range(3):
        primary.put(f"raw/part-{i}.bin", bytes([i]) * 50_000)

    class NoChecksums(faults.Flipping):
        def list(self, prefix=""):
            return (replace(i, crc32c=None) for i in self.inner.list(prefix))

        def head(self, key):
            return replace(self.inner.head(key), crc32c=None)

    flaky = NoChecksums(primary, {"raw/part-1.bin"}, times=1)  # the two reads disagree
    report = copy_prefix(flaky, secondary, "raw", "raw", retry=no_sleep)
    assert report.hashed == ["part-0.bin", "part-1.bin", "part-2.bin"] and report.retries >= 1
    for i in range(3):
        assert body(secondary, f"raw/part-{i}.bin") == bytes([i]) * 50_000

    again = copy_prefix(NoChecksums(primary, set()), secondary, "raw", "raw")
    assert again.bytes_copied == 0 and len(again.skipped) == 3  # same size, copied after the write


def test_markers_land_in_commit_order_deepest_first_decisive_last(primary, secondary, faults):
    # a Megatron torch_dist checkpoint under a run with its `latest_checkpointed_iteration.txt`
    for name in ("__0_0.distcp", "__1_0.distcp", "common.pt", "metadata.json", ".metadata"):
        primary.put(f"run/iter_0000100/{name}", name.encode() * 100)
    primary.put("run/latest_checkpointed_iteration.txt", b"100")
    watched = faults.Proxy(secondary)
    report = copy_prefix(primary, watched, "run", "run")
    order = [key.removeprefix("run/") for _, key in watched.calls]
    assert sorted(order[:2]) == ["iter_0000100/__0_0.distcp", "iter_0000100/__1_0.distcp"]
    assert order[2:] == [
        "iter_0000100/common.pt",
        "iter_0000100/metadata.json",
        "iter_0000100/.metadata",
        "latest_checkpointed_iteration.txt",
    ]
    assert report.markers == order[2:]


def test_a_committed_replica_is_trusted_unless_asked_to_compare_every_object(
    primary, secondary, faults, write_checkpoint
):
    write_checkpoint(primary, CKPT, 100)
    copy_prefix(primary, secondary, CKPT, CKPT)
    secondary.put(SHARDS[1], b"\x00" * primary.head(SHARDS[1]).size)  # rot at rest, same size

    trusted = copy_prefix(primary, secondary, CKPT, CKPT)
    assert trusted.bytes_copied == 0 and len(trusted.skipped) == 5  # certify's to find

    checked = copy_prefix(primary, secondary, CKPT, CKPT, trust_committed=False)
    assert checked.server_copied == ["shard-001.bin"]  # local to local: a file copy
    assert checked.copied == [MANIFEST_NAME]  # the marker: a conditional PUT
    assert_replica_matches(primary, secondary)
