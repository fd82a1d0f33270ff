"""A store whose endpoint is down answers ProviderUnavailable within its deadline, for S3 and
GCS alike: a dead port (connections refused) and a frozen server (SIGSTOP: connections
accepted, nothing answered). Probes then vote failing in seconds and certification goes on
with the replica alone.

The elapsed-time bounds are the deadline's contract (deadline + one backoff and some slack
for a loaded machine), not speed goals.
"""

import time

import pytest

from lifeboat_dr.core.certify import certify_replica
from lifeboat_dr.core.detection.provider import ProviderProbe
from lifeboat_dr.core.detection.signals import Status
from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.health.control_plane import StoreControlPlane
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.providers.storage.base import store_deadline
from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from lifeboat_dr.testing.emulators import dead_port, new_gcs_bucket, new_s3_bucket, stopped_server

SLACK_S = 3.0


@pytest.fixture(autouse=True)
def _fake_aws_credentials(monkeypatch):
    from lifeboat_dr.testing.emulators import AWS_TEST_ENV

    for k, v in AWS_TEST_ENV.items():
        monkeypatch.setenv(k, v)


def _store(kind: str, url: str, deadline_s: float):
    if kind == "s3":
        return S3Store("down-bucket", "run", endpoint_url=url, deadline_s=deadline_s)
    return GcsStore("down-bucket", "run", endpoint_url=url, deadline_s=deadline_s)


def _timed_failure(call) -> tuple[float, ProviderUnavailable]:
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable) as err:
        call()
    return time.monotonic() - started, err.value


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_a_dead_port_is_provider_unavailable_within_the_deadline(kind):
    store = _store(kind, dead_port(), deadline_s=4)
    for call in (lambda: store.head("x"), lambda: list(store.list()), lambda: store.put("x", b"1")):
        elapsed, err = _timed_failure(call)
        assert elapsed < 4 + SLACK_S
        assert store.uri in str(err) and "within 4s" in str(err)


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_a_frozen_server_is_provider_unavailable_within_the_deadline(kind):
    with stopped_server(kind) as url:
        store = _store(kind, url, deadline_s=2)
        elapsed, err = _timed_failure(lambda: store.head("x"))
        assert elapsed < 2 + SLACK_S
        assert "within 2s" in str(err)
        elapsed, _ = _timed_failure(lambda: list(store.list()))
        assert elapsed < 2 + SLACK_S


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_the_provider_probe_votes_failing_in_seconds_when_the_primary_store_hangs(kind):
    from lifeboat_dr.flows.wiring import probe_deadline

    with stopped_server(kind) as url:
        store = _store(kind, url, deadline_s=probe_deadline())
        started = time.monotonic()
        reading = ProviderProbe(StoreControlPlane(store)).check(None)
        elapsed = time.monotonic() - started
    assert reading.status is Status.failing and reading.evidence["errors"] == 3
    assert elapsed < 10


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_certification_goes_on_with_the_replica_when_the_source_is_down(kind, s3_endpoint, gcs_endpoint):
    if kind == "s3":
        source = S3Store(new_s3_bucket(s3_endpoint), "run", endpoint_url=s3_endpoint)
        replica = GcsStore(new_gcs_bucket(gcs_endpoint), "run", endpoint_url=gcs_endpoint)
    else:
        source = GcsStore(new_gcs_bucket(gcs_endpoint), "run", endpoint_url=gcs_endpoint)
        replica = S3Store(new_s3_bucket(s3_endpoint), "run", endpoint_url=s3_endpoint)
    replicate(source, replica, write_checkpoint(source, "manifest", 100))
    down = _store(kind, dead_port(), deadline_s=3)
    started = time.monotonic()
    report = certify_replica(replica, down, layout="manifest")
    assert report.certified is not None and report.certified.step == 100
    assert time.monotonic() - started < 10


def test_the_deadline_comes_from_the_argument_the_environment_or_30s(monkeypatch):
    monkeypatch.delenv("LIFEBOAT_STORE_DEADLINE", raising=False)
    assert store_deadline() == 30 and store_deadline(5) == 5
    monkeypatch.setenv("LIFEBOAT_STORE_DEADLINE", "7.5")
    assert store_deadline() == 7.5
    assert open_store("s3://b/p", endpoint_url=dead_port()).deadline_s == 7.5
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("LIFEBOAT_STORE_DEADLINE", bad)
        with pytest.raises(ConfigError, match="LIFEBOAT_STORE_DEADLINE|positive"):
            store_deadline()
