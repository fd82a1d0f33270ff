"""LIFEBOAT_S3_ENGINE=awscrt (providers/storage/s3_crt.py) where the endpoint fails: a single
PUT through awscrt's client is bounded by the store's deadline as botocore's is, and a wrong
engine name is one line. Its Store contract runs on SeaweedFS and moto (test_contract.py)."""

import time

import pytest

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import AWS_TEST_ENV, HangingServer, dead_port

pytest.importorskip("awscrt")
SLACK_S = 3.0


@pytest.fixture(autouse=True)
def _awscrt(monkeypatch):
    for k, v in AWS_TEST_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LIFEBOAT_S3_ENGINE", "awscrt")


def _failure_within(store: S3Store, bound_s: float) -> str:
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable) as err:
        store.put("shard", b"w" * 4096)
    assert time.monotonic() - started < bound_s
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_put_to_a_dead_port_is_provider_unavailable_within_the_deadline():
    store = S3Store("down-bucket", "run", endpoint_url=dead_port(), deadline_s=4)
    assert store.uri in _failure_within(store, 4 + SLACK_S)


def test_a_put_to_a_hanging_endpoint_is_provider_unavailable_within_the_deadline():
    with HangingServer() as hanging:
        store = S3Store("down-bucket", "run", endpoint_url=hanging.url, deadline_s=4)
        assert "no answer within 4s" in _failure_within(store, 4 + 5 + SLACK_S)  # + the cancel's wait


def test_an_unknown_engine_is_one_line_naming_the_variable(monkeypatch):
    monkeypatch.setenv("LIFEBOAT_S3_ENGINE", "curl")
    with pytest.raises(ConfigError, match="LIFEBOAT_S3_ENGINE='curl': one of botocore, awscrt"):
        S3Store("bucket", "run")
