"""The S3 write path on a real moto server: one request per object up to the single-PUT
limit, parts beyond it uploaded concurrently from the byte budget, each byte hashed once, the
CRC32C sent with the body, no HEAD after a write, nothing committed from a bad stream."""

from __future__ import annotations

import threading

import boto3
import pytest

from lifeboat_dr.kernel.crc32c import crc32c, crc32c_combine
from lifeboat_dr.kernel.errors import ChecksumMismatch, NotFound, ProviderUnavailable
from lifeboat_dr.providers.storage import buffers
from lifeboat_dr.providers.storage import s3 as s3mod
from lifeboat_dr.providers.storage.s3 import S3Store, part_size
from lifeboat_dr.testing.emulators import new_s3_bucket

MiB = 1 << 20


@pytest.fixture
def store(s3_endpoint):
    return S3Store(new_s3_bucket(s3_endpoint), "ckpt", endpoint_url=s3_endpoint)


def _chunks(size: int, seed: int = 1, chunk: int = MiB):
    block = bytes((seed * 31 + i) % 251 for i in range(chunk))
    for start in range(0, size, chunk):
        yield block[: min(chunk, size - start)]


def _pending_uploads(store: S3Store) -> list:
    raw = boto3.client("s3", endpoint_url=store.endpoint_url, region_name="us-east-1")
    return raw.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])


def test_crc32c_of_parts_combines_into_the_whole_without_reading_it_again():
    data = bytes(range(256)) * 4099
    for cut in (0, 1, 1000, len(data) // 2, len(data)):
        a, b = data[:cut], data[cut:]
        assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(data)


def test_part_size_is_chosen_per_object_to_fit_the_part_limit():
    assert part_size(None) == part_size(20 * MiB) == s3mod.PART_SIZE
    huge = 200 << 30  # 200 GiB: 8 MiB parts would need 25,600 of them
    assert part_size(huge) % MiB == 0 and -(-huge // part_size(huge)) <= s3mod.MAX_PARTS


def test_an_object_up_to_the_single_put_limit_is_one_request_and_no_head(store):
    size = s3mod.SINGLE_PUT_LIMIT
    data = b"".join(_chunks(size))
    info = store.put("w", _chunks(size), crc32c=crc32c(data), size=size)
    assert dict(store.calls) == {"PutObject": 1}
    head = store.head("w")  # the server's own record agrees with the write's answer
    assert (
        (head.size, head.crc32c, head.etag)
        == (info.size, info.crc32c, info.etag)
        == (size, crc32c(data), info.etag)
    )


def test_a_large_object_goes_in_concurrent_parts_with_a_full_object_crc32c(store, monkeypatch):
    size = 5 * s3mod.PART_SIZE + 123
    data = b"".join(_chunks(size, seed=2))
    in_flight, most = [0], [0]
    lock = threading.Lock()
    upload = S3Store._upload_part

    def watched(self, *args):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            return upload(self, *args)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(S3Store, "_upload_part", watched)
    info = store.put("big", _chunks(size, seed=2), crc32c=crc32c(data), size=size)
    assert store.calls["UploadPart"] == 6 and store.calls["CompleteMultipartUpload"] == 1
    assert "HeadObject" not in store.calls
    assert most[0] >= 2  # parts overlapped
    head = store.head("big")  # moto computes the multipart FULL_OBJECT CRC32C from the bytes
    assert (head.size, head.crc32c) == (info.size, info.crc32c) == (size, crc32c(data))
    assert b"".join(store.read("big")) == data


def test_a_stream_that_contradicts_its_crc32c_is_aborted_and_nothing_lands(store):
    size = 3 * s3mod.PART_SIZE
    data = b"".join(_chunks(size, seed=3))
    with pytest.raises(ChecksumMismatch):
        store.put("big", _chunks(size, seed=3), crc32c=crc32c(data) ^ 1, size=size)
    assert store.calls["AbortMultipartUpload"] == 1 and "CompleteMultipartUpload" not in store.calls
    with pytest.raises(NotFound):
        store.head("big")
    assert _pending_uploads(store) == []


def test_a_source_failing_mid_multipart_leaves_no_object_and_no_upload(store):
    def broken():
        yield from _chunks(2 * s3mod.PART_SIZE + MiB, seed=4)
        raise ProviderUnavailable("source connection reset")

    with pytest.raises(ProviderUnavailable):
        store.put("big", broken(), size=4 * s3mod.PART_SIZE)
    with pytest.raises(NotFound):
        store.head("big")
    assert _pending_uploads(store) == []
    assert buffers.BUFFERS.free == buffers.BUFFERS.total  # every reservation given back


def test_memory_in_flight_stays_within_the_budget_whatever_the_sizes(store, monkeypatch):
    budget = buffers.ByteBudget(3 * s3mod.PART_SIZE)
    monkeypatch.setattr(s3mod, "BUFFERS", budget)
    sizes = [40 * MiB, 12 * MiB, 12 * MiB, 3 * MiB]
    threads = [
        threading.Thread(target=store.put, args=(f"o{i}", _chunks(n, seed=i)), kwargs={"size": n})
        for i, n in enumerate(sizes)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, n in enumerate(sizes):
        assert store.head(f"o{i}").crc32c == crc32c(b"".join(_chunks(n, seed=i)))
    assert 0 < budget.peak <= budget.total and budget.free == budget.total


def test_a_reservation_larger_than_the_budget_runs_alone_instead_of_waiting_forever():
    budget = buffers.ByteBudget(10)
    with budget.held(100):
        assert budget.free == 0
    assert budget.free == 10


def test_a_single_put_holds_the_object_once_not_its_chunks_and_a_joined_copy(store, monkeypatch):
    budget = buffers.ByteBudget(64 * MiB)
    monkeypatch.setattr(s3mod, "BUFFERS", budget)
    size = s3mod.SINGLE_PUT_LIMIT
    store.put("w", _chunks(size, seed=5), size=size)
    assert budget.peak == size and budget.free == budget.total
    assert b"".join(store.read("w")) == b"".join(_chunks(size, seed=5))


def test_a_retried_request_sends_the_whole_body_again(store, monkeypatch):
    from botocore.exceptions import ConnectionClosedError

    client = store._client()
    put = client.put_object
    tries = []

    def cut_after_a_few_bytes(**kwargs):
        tries.append(1)
        if len(tries) == 1:
            kwargs["Body"].read(1000)  # the connection drops mid-body
            raise ConnectionClosedError(endpoint_url=store.endpoint_url)
        return put(**kwargs)

    monkeypatch.setattr(client, "put_object", cut_after_a_few_bytes)
    monkeypatch.setattr(store, "backoff_base", 0.0)
    size = 3 * MiB
    data = b"".join(_chunks(size, seed=6))
    info = store.put("r", _chunks(size, seed=6), crc32c=crc32c(data), size=size)
    assert len(tries) == 2 and store.calls["PutObject"] == 2
    assert info.size == size and b"".join(store.read("r")) == data


def test_a_body_is_filled_in_place_and_a_stream_of_the_wrong_length_is_refused():
    body, crc = buffers.fill([b"abc", b"", b"defg"], 7, "k")
    assert (len(body), body.tell(), crc) == (7, 0, crc32c(b"abcdefg"))
    assert body.read(2) == b"ab" and body.read() == b"cdefg"
    body.seek(0)
    assert body.read() == b"abcdefg"
    body.close()
    assert buffers.fill([], 0, "k") == (b"", 0)
    with pytest.raises(ChecksumMismatch, match="more than the 5 bytes"):
        buffers.fill([b"abc", b"def"], 5, "k")
    with pytest.raises(ChecksumMismatch, match="read 3 bytes, expected 5"):
        buffers.fill([b"abc"], 5, "k")


def _local_file(tmp_path, size: int, seed: int):
    from lifeboat_dr.providers.storage.files import LocalFile

    data = b"".join(_chunks(size, seed=seed))
    path = tmp_path / f"f{seed}"
    path.write_bytes(data)
    return LocalFile(path, size, str(path)), data


def test_a_local_file_goes_in_ranges_read_as_sent_with_a_full_object_crc32c(store, tmp_path, monkeypatch):
    budget = buffers.ByteBudget(4 * MiB)  # parts in flight hold a read chunk each, not a part
    monkeypatch.setattr(s3mod, "BUFFERS", budget)
    monkeypatch.setattr(s3mod, "PART_WORKERS", 2)  # small parts in a small test
    size = 3 * s3mod.PART_SIZE + 1234
    f, data = _local_file(tmp_path, size, seed=7)
    psize = s3mod.file_part_size(size)
    with f:
        info = store.put("big", f, crc32c=crc32c(data), size=size)
    assert store.calls["UploadPart"] == -(-size // psize) > 1 and "HeadObject" not in store.calls
    head = store.head("big")
    assert (head.size, head.crc32c) == (info.size, info.crc32c) == (size, crc32c(data))
    assert b"".join(store.read("big")) == data
    assert psize > budget.total  # no part was held whole
    assert 0 < budget.peak <= budget.total and budget.free == budget.total


def test_a_local_file_that_contradicts_its_crc32c_is_aborted_and_nothing_lands(store, tmp_path):
    size = 2 * s3mod.SINGLE_PUT_LIMIT
    f, data = _local_file(tmp_path, size, seed=8)
    with f, pytest.raises(ChecksumMismatch):
        store.put("big", f, crc32c=crc32c(data) ^ 1, size=size)
    assert store.calls["AbortMultipartUpload"] == 1 and "CompleteMultipartUpload" not in store.calls
    with pytest.raises(NotFound):
        store.head("big")
    assert _pending_uploads(store) == [] and buffers.BUFFERS.free == buffers.BUFFERS.total


def test_a_file_range_is_a_seekable_body_of_its_own_length(tmp_path):
    from lifeboat_dr.providers.storage.files import LocalFile

    path = tmp_path / "f"
    path.write_bytes(bytes(range(100)))
    with pytest.raises(ChecksumMismatch):  # not the size listed: refused before a byte is sent
        LocalFile(path, 99, "f")
    with LocalFile(path, 100, "f") as f:
        part = f.range(10, 20)
        assert len(part) == 20 and part.read(5) == bytes(range(10, 15)) and part.tell() == 5
        assert part.read() == bytes(range(15, 30)) and part.read(1) == b""
        assert part.seek(0) == 0 and part.read(-1) == bytes(range(10, 30))
        assert f.crc32c(10, 20) == crc32c(bytes(range(10, 30)))
        path.write_bytes(bytes(range(50)))  # shrunk under the copy
        with pytest.raises(ChecksumMismatch):
            f.range(40, 20).read()


def test_a_local_file_part_size_lets_one_file_fill_the_workers():
    for size in (20 * MiB, 256 * MiB, 2048 * MiB, 200 << 30):
        psize = s3mod.file_part_size(size)
        assert psize % MiB == 0 and psize >= s3mod.PART_SIZE and -(-size // psize) <= s3mod.MAX_PARTS
        assert psize <= s3mod.FILE_PART_LIMIT or psize == s3mod.part_size(size)
    assert -(-(2048 * MiB) // s3mod.file_part_size(2048 * MiB)) >= s3mod.PART_WORKERS
