"""S3-only behaviour on a real moto server: throttling, missing buckets, credentials,
checksums S3 cannot compare with GCS, multipart puts and copies."""

import pytest

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.providers.storage import s3 as s3mod
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.providers.storage.s3_models import lean_loader
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_s3_bucket
from tests.s3_objects import crc64nvme, put_composite_multipart, put_crc64nvme_only


@pytest.fixture
def bucket(s3_endpoint):
    return new_s3_bucket(s3_endpoint)


def test_slowdown_is_retried_with_backoff_then_succeeds(s3_endpoint, bucket):
    with ThrottlingProxy(s3_endpoint) as proxy:
        store = S3Store(bucket, "ckpt", endpoint_url=proxy.url)
        store.backoff_base = 0.01
        store.put("shard", b"data")
        store.calls.clear()
        proxy.fail = 2  # the next two requests get 503 SlowDown
        assert store.head("shard").crc32c == crc32c(b"data")
        assert store.calls["HeadObject"] == 3


def test_429_is_retried_like_slowdown(s3_endpoint, bucket):
    with ThrottlingProxy(s3_endpoint) as proxy:
        store = S3Store(bucket, "", endpoint_url=proxy.url)
        store.backoff_base = 0.01
        proxy.status, proxy.fail = 429, 1
        assert list(store.list()) == []
        assert store.calls["ListObjectsV2"] == 2


def test_throttling_that_never_ends_gives_up_as_provider_unavailable(s3_endpoint, bucket):
    with ThrottlingProxy(s3_endpoint) as proxy:
        store = S3Store(bucket, "ckpt", endpoint_url=proxy.url)
        store.backoff_base, store.max_attempts = 0.01, 3
        proxy.fail = 100
        with pytest.raises(ProviderUnavailable, match=r"after 3 attempt\(s\).*503"):
            store.head("shard")
        assert proxy.seen == 3


def test_missing_bucket_names_the_store(s3_endpoint):
    store = S3Store("no-such-bucket", "ckpt", endpoint_url=s3_endpoint)
    with pytest.raises(NotFound, match=r"s3://no-such-bucket/ckpt: bucket 'no-such-bucket' does not exist"):
        list(store.list())


def test_missing_credentials_is_a_config_error_naming_the_store(s3_endpoint, monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    store = S3Store("bucket", "ckpt", endpoint_url=s3_endpoint)
    with pytest.raises(ConfigError, match="s3://bucket/ckpt: no usable S3 credentials"):
        store.head("x")


def test_unreachable_endpoint_is_provider_unavailable(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)  # credentials are not what is missing: the endpoint is
    store = S3Store("bucket", "", endpoint_url="http://127.0.0.1:9")
    store.backoff_base, store.max_attempts = 0.01, 2
    with pytest.raises(ProviderUnavailable, match="s3://bucket"):
        store.head("x")


def test_large_streamed_put_is_multipart_with_a_full_object_crc32c(s3_endpoint, bucket):
    store = S3Store(bucket, "ckpt", endpoint_url=s3_endpoint)
    part = b"\x01" * (1 << 20)
    chunks = [part] * 9 + [b"tail"]  # 9 MiB + 4 B: two parts at 8 MiB
    info = store.put("big", iter(chunks))
    assert store.calls["UploadPart"] == 2
    assert info.size == 9 * (1 << 20) + 4
    assert info.crc32c == crc32c(b"".join(chunks))


def test_a_complete_answered_late_is_waited_for_not_retried_into_a_vanished_upload(s3_endpoint, bucket):
    """S3 assembles the object before it answers CompleteMultipartUpload (minutes for large
    ones). Under the store's normal read timeout the retry would find the upload already
    completed and gone (seen with a 2 GiB object on moto: 500 five times, then the first
    attempt's 200 after the client had given up); the Complete's wait grows with the object."""
    with ThrottlingProxy(s3_endpoint) as proxy:
        store = S3Store(bucket, "ckpt", endpoint_url=proxy.url, deadline_s=2)  # reads time out at 1 s
        proxy.late = ("POST /" + bucket + "/ckpt/big?uploadId=", 1.5)
        part = b"\x01" * (1 << 20)
        info = store.put("big", iter([part] * 9))
    assert store.calls["CompleteMultipartUpload"] == 1
    assert info.crc32c == crc32c(part * 9)


def test_composite_multipart_checksum_is_unverifiable_by_metadata(s3_endpoint, bucket):
    put_composite_multipart(s3_endpoint, bucket, "c", b"x" * 10)
    assert S3Store(bucket, "", endpoint_url=s3_endpoint).head("c").crc32c is None


def test_crc64nvme_only_object_is_unverifiable_by_metadata(s3_endpoint, bucket):
    assert crc64nvme(b"123456789") == 0xAE8B14860A799888  # the catalogue's check value
    put_crc64nvme_only(s3_endpoint, bucket, "n", b"abc")
    info = S3Store(bucket, "", endpoint_url=s3_endpoint).head("n")
    assert (info.size, info.crc32c) == (3, None)


def test_large_server_copy_uses_upload_part_copy_and_keeps_full_object_crc32c(
    s3_endpoint, bucket, monkeypatch
):
    monkeypatch.setattr(s3mod, "COPY_LIMIT", 1 << 20)
    monkeypatch.setattr(s3mod, "COPY_PART_SIZE", 5 << 20)
    src = S3Store(bucket, "src", endpoint_url=s3_endpoint)
    dst = S3Store(new_s3_bucket(s3_endpoint), "dst", endpoint_url=s3_endpoint)
    data = b"\x07" * (6 << 20)
    src.put("w", data)
    copied = dst.server_copy(src, "w", "w")
    assert dst.calls["UploadPartCopy"] == 2
    assert (copied.size, copied.crc32c) == (len(data), crc32c(data))


@pytest.mark.parametrize("planned", ["nothing", "a stale version"])
def test_a_large_server_copy_completes_only_over_what_it_planned_against(
    s3_endpoint, bucket, monkeypatch, planned
):
    """Above CopyObject's ceiling the copy is multipart: its precondition rides on
    CompleteMultipartUpload, so the parts copied never become the object, and no upload is
    left behind."""
    monkeypatch.setattr(s3mod, "COPY_LIMIT", 1 << 20)
    monkeypatch.setattr(s3mod, "COPY_PART_SIZE", 5 << 20)
    src = S3Store(bucket, "src", endpoint_url=s3_endpoint)
    dst = S3Store(new_s3_bucket(s3_endpoint), "dst", endpoint_url=s3_endpoint)
    src.put("w", b"\x07" * (6 << 20))
    stale = dst.put("w", b"planned against")
    dst.put("w", b"written since")  # the active lineage's object
    cond = {"if_none_match": True} if planned == "nothing" else {"if_match": stale.version}
    with pytest.raises(PreconditionFailed):
        dst.server_copy(src, "w", "w", **cond)
    assert dst.calls["UploadPartCopy"] == 2 and dst.calls["AbortMultipartUpload"] == 1
    assert b"".join(dst.read("w")) == b"written since"


def test_copy_from_another_endpoint_declines(s3_endpoint, bucket):
    here = S3Store(bucket, "", endpoint_url=s3_endpoint)
    elsewhere = S3Store("other", "", endpoint_url="http://127.0.0.1:9")
    assert here.server_copy(elsewhere, "a", "a") is None


def test_clients_share_one_lean_copy_of_botocores_s3_models(s3_endpoint, bucket):
    """Two stores, three clients (a slow call gets its own read timeout): one loader, so
    S3's models are parsed once, without documentation, the endpoint table cut to S3."""
    a, b = S3Store(bucket, "a", endpoint_url=s3_endpoint), S3Store(bucket, "b", endpoint_url=s3_endpoint)
    clients = [a._client(), a._client(120.0), b._client()]
    models = {id(c.meta.service_model._service_description) for c in clients}
    assert len(models) == 1
    model = clients[0].meta.service_model
    assert model.operation_model("PutObject").documentation == ""
    assert model.shape_for("PutObjectRequest").members["Body"].documentation == ""
    endpoints = lean_loader().load_data("endpoints")
    assert {s for p in endpoints["partitions"] for s in p["services"]} <= {"s3", "s3-control"}
    a.put("k", b"v")  # and the lean client still works end to end
    assert b"".join(S3Store(bucket, "a", endpoint_url=s3_endpoint).read("k")) == b"v"


@pytest.mark.processes
def test_an_s3_client_loads_no_pyopenssl_nor_cryptography_and_keeps_the_stdlib_ssl_context():
    """botocore imports urllib3's pyOpenSSL shim only for the SSLContext the stdlib gives it
    anyway: ~7 MiB of every S3 process (#31). A later import of the shim still works."""
    import json
    import subprocess
    import sys

    code = (
        "import json, os, ssl, sys\n"
        "os.environ.update(AWS_ACCESS_KEY_ID='k', AWS_SECRET_ACCESS_KEY='s', AWS_DEFAULT_REGION='us-east-1')\n"
        "from lifeboat_dr.providers.storage.s3 import S3Store\n"
        "S3Store('b', endpoint_url='http://127.0.0.1:9')._client()\n"
        "import botocore.httpsession as h\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'OpenSSL', 'cryptography', 'bcrypt'})\n"
        "import urllib3.contrib.pyopenssl\n"
        "print(json.dumps([loaded, h.SSLContext is ssl.SSLContext]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], True]
