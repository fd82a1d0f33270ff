"""A guarded commit whose answer is lost (#27, medium): it reads back whether it landed.

The write reaches S3 and lands; the connection is reset before the answer comes back. The
client's retry of a create-only PUT then gets 412: a training loop that took that for "a
second writer" crashed though its checkpoint had committed. Now the commit reads its marker
(and the lease's count) back, and only a real refusal stops the trainer: fenced, or another
writer's marker there. Real peers: moto behind the loopback fault proxy.
"""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.core.commit import commit_or_exit
from lifeboat_dr.core.fencing import COMMIT_MARKER, LEASE_KEY, fence, guarded_commit, read_lease
from lifeboat_dr.kernel.errors import PreconditionFailed, StopFailover
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import ThrottlingProxy, new_s3_bucket

MARKER = f"step-10/{COMMIT_MARKER}"


@pytest.fixture
def proxied(s3_endpoint):
    with ThrottlingProxy(s3_endpoint) as proxy:
        bucket = new_s3_bucket(s3_endpoint)
        store = S3Store(bucket, "ckpt", endpoint_url=proxy.url, deadline_s=3)
        direct = S3Store(bucket, "ckpt", endpoint_url=s3_endpoint)
        guarded_commit(direct, f"step-5/{COMMIT_MARKER}", 0, 5)  # the lease exists: commits go by if-match
        yield proxy, store, direct


def test_a_marker_put_whose_reply_is_lost_commits_once(proxied):
    proxy, store, direct = proxied
    dropped = proxy.inject("drop_reply", f"PUT /{direct.bucket}/ckpt/{MARKER}")

    assert commit_or_exit("step-10", 10, store=store, epoch=0) == 2
    assert dropped.hit == 1
    marker = json.loads(b"".join(direct.read(MARKER)))
    assert (marker["step"], marker["seq"]) == (10, 2) and read_lease(direct)[0].commits == 2


def test_a_lease_count_whose_reply_is_lost_is_counted_once(proxied):
    proxy, store, direct = proxied
    dropped = proxy.inject("drop_reply", f"PUT /{direct.bucket}/ckpt/{LEASE_KEY}")

    assert guarded_commit(store, MARKER, 0, 10) == 2
    assert dropped.hit == 1
    assert read_lease(direct)[0].commits == 2  # not 3: the lost write was ours
    assert json.loads(b"".join(direct.read(MARKER)))["seq"] == 2


def test_a_marker_whose_reply_is_lost_and_whose_retries_fail_is_read_back_later(proxied):
    proxy, store, direct = proxied
    proxy.inject("drop_reply", f"PUT /{direct.bucket}/ckpt/{MARKER}")
    proxy.inject("503", f"PUT /{direct.bucket}/ckpt/{MARKER}", times=None)

    assert guarded_commit(store, MARKER, 0, 10) == 2


def test_only_a_real_refusal_stops_the_trainer(proxied):
    proxy, store, direct = proxied
    direct.put(MARKER, b'{"epoch": 0, "step": 10, "seq": 9}')  # another writer's marker
    with pytest.raises(PreconditionFailed):
        guarded_commit(store, MARKER, 0, 10)
    fence(direct, run_id="failover-1", holder="dr")
    with pytest.raises(SystemExit) as fenced:
        commit_or_exit("step-20", 20, store=store, epoch=0)
    assert fenced.value.code == 75
    with pytest.raises(StopFailover):
        guarded_commit(store, f"step-30/{COMMIT_MARKER}", 0, 30)


def test_a_marker_whose_reply_is_lost_and_whose_first_read_back_fails_is_read_back_again(proxied):
    """Found by the fault simulator (#28): the marker's answer lost, the read back met a
    timeout too, and the training loop stopped on it though its checkpoint had committed."""
    proxy, store, direct = proxied
    store.max_attempts = 1  # each failed request is the caller's: no retry inside the client
    proxy.inject("drop_reply", f"PUT /{direct.bucket}/ckpt/{MARKER}")
    proxy.inject("503", f"GET /{direct.bucket}/ckpt/{MARKER}", times=2)

    assert commit_or_exit("step-10", 10, store=store, epoch=0) == 2
