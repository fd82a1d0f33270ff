"""What SeaweedFS (4.48, `weed server -s3`) answers where S3 servers differ: objects Lifeboat
did not write are unverifiable by metadata there too, never counted verified, and the body
checks it makes that moto does not (the contract suite, tests/storage/test_contract.py, runs
every Store promise on it)."""

import boto3
import pytest

from lifeboat_dr.kernel.crc32c import crc32c, to_b64
from lifeboat_dr.kernel.errors import ChecksumMismatch, NotFound
from lifeboat_dr.providers.storage import s3 as s3mod
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import new_s3_bucket
from tests.s3_objects import put_composite_multipart, put_crc64nvme_only


@pytest.fixture
def store(seaweedfs_endpoint):
    return S3Store(new_s3_bucket(seaweedfs_endpoint), "", endpoint_url=seaweedfs_endpoint)


def _plain_put(store: S3Store, key: str, data: bytes) -> None:
    """`key` as a default boto3 client or `aws s3 cp` writes it: a CRC32, no CRC32C."""
    s3 = boto3.client("s3", endpoint_url=store.endpoint_url, region_name="us-east-1")
    s3.put_object(Bucket=store.bucket, Key=key, Body=data, ChecksumAlgorithm="CRC32")


def test_objects_without_a_full_object_crc32c_are_unverifiable_by_metadata(store):
    put_composite_multipart(store.endpoint_url, store.bucket, "composite", b"x" * 10)
    put_crc64nvme_only(store.endpoint_url, store.bucket, "crc64nvme", b"abc")
    _plain_put(store, "crc32", b"plain")
    assert [store.head(k).crc32c for k in ("composite", "crc64nvme", "crc32")] == [None, None, None]


def test_a_copy_of_an_object_without_a_crc32c_stays_unverifiable(store, seaweedfs_endpoint):
    """Lifeboat asks the server to compute the copy's CRC32C; SeaweedFS does not (next
    test): the copy has none, and is reported so, never as a value nobody computed."""
    _plain_put(store, "shard", b"plain")
    replica = S3Store(new_s3_bucket(seaweedfs_endpoint), "", endpoint_url=seaweedfs_endpoint)
    copied = replica.server_copy(store, "shard", "shard")
    assert (copied.crc32c, replica.head("shard").crc32c) == (None, None)
    assert b"".join(replica.read("shard")) == b"plain"


@pytest.mark.xfail(
    strict=True,
    reason="SeaweedFS 4.48 ignores x-amz-checksum-algorithm on CopyObject: S3 computes the copy's CRC32C",
)
def test_a_copy_asked_for_a_crc32c_gets_one_computed_by_the_server(store, seaweedfs_endpoint):
    _plain_put(store, "shard", b"plain")
    replica = S3Store(new_s3_bucket(seaweedfs_endpoint), "", endpoint_url=seaweedfs_endpoint)
    assert replica.server_copy(store, "shard", "shard").crc32c == crc32c(b"plain")


def test_a_multipart_copy_of_an_object_without_a_crc32c_is_composite_and_unverifiable(
    store, seaweedfs_endpoint, monkeypatch
):
    monkeypatch.setattr(s3mod, "COPY_LIMIT", 1 << 20)
    monkeypatch.setattr(s3mod, "COPY_PART_SIZE", 5 << 20)
    _plain_put(store, "big", b"\x07" * (6 << 20))
    replica = S3Store(new_s3_bucket(seaweedfs_endpoint), "", endpoint_url=seaweedfs_endpoint)
    copied = replica.server_copy(store, "big", "big")
    assert replica.calls["UploadPartCopy"] == 2
    assert (copied.crc32c, replica.head("big").crc32c) == (None, None)


def test_a_part_whose_bytes_differ_from_its_crc32c_is_refused_by_the_server(store, monkeypatch):
    """The server checks every part's CRC32C (moto does not): a part corrupted between the
    hash and the wire never becomes part of an object."""
    monkeypatch.setattr(s3mod, "to_b64", lambda crc: to_b64(crc ^ 1))  # every value sent is wrong
    with pytest.raises(ChecksumMismatch, match="BadDigest"):
        store.put("shard", iter([b"w" * (8 << 20), b"w"]))
    with pytest.raises(NotFound):
        store.head("shard")


def test_a_local_file_changed_between_its_hash_and_the_wire_is_refused_by_the_server(store, tmp_path):
    """A part from a local file is read from disk when sent, after it was hashed (files.py):
    bytes rewritten in between fail the part's CRC32C at the server, and nothing lands."""
    from lifeboat_dr.providers.storage.files import LocalFile

    path = tmp_path / "shard"
    size = 2 * s3mod.SINGLE_PUT_LIMIT
    path.write_bytes(b"a" * size)
    with LocalFile(path, size, "shard") as f:
        hashed = f.crc32c

        def then_rewritten(start, length):
            crc = hashed(start, length)
            with open(path, "r+b") as w:  # the same size, other bytes
                w.write(b"b" * size)
            return crc

        f.crc32c = then_rewritten
        with pytest.raises(ChecksumMismatch, match="BadDigest"):
            store.put("shard", f, size=size)
    with pytest.raises(NotFound):
        store.head("shard")
