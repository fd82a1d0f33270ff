"""Live GPU quota (`providers/compute/service_quotas.py`): the real boto3 adapter against a
loopback stub of Service Quotas' API and the fake pass one contract (the value, NotFound,
AccessDenied as ConfigError, a failing or unanswering service as ProviderUnavailable); moto,
which serves Service Quotas for `vpc` only, has no EC2 quota (the gap the fake fills); and the
catalog gives each AWS GPU place its pool and per-GPU vCPUs."""

from __future__ import annotations

import time

import pytest

from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.compute.service_quotas import (
    AwsServiceQuotas,
    FakeServiceQuotas,
    InstanceShape,
    aws_shapes,
)
from lifeboat_dr.testing.emulators import HangingServer
from lifeboat_dr.testing.service_quotas_stub import ServiceQuotasStub

P = "L-417A185B"
LIMITS = {("us-west-2", P): 1536.0}


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture(params=["aws-against-stub", "fake"])
def quotas(request):
    """(source, deny(region), fail(region)) for the adapter and the fake alike."""
    if request.param == "fake":
        fake = FakeServiceQuotas(LIMITS)
        yield fake, fake.denied.add, fake.down.add
        return
    with ServiceQuotasStub(LIMITS) as stub:
        yield AwsServiceQuotas(stub.url), stub.denied.add, stub.failing.add


def test_the_applied_quota_is_read_in_vcpus(quotas):
    source, _, _ = quotas
    assert source.vcpu_limit("us-west-2", P) == 1536.0


def test_a_quota_the_service_does_not_hold_is_not_found(quotas):
    source, _, _ = quotas
    with pytest.raises(NotFound, match="L-DB2E81BA"):
        source.vcpu_limit("us-west-2", "L-DB2E81BA")
    with pytest.raises(NotFound):
        source.vcpu_limit("eu-west-1", P)


def test_no_permission_is_a_config_error_naming_the_quota(quotas):
    source, deny, _ = quotas
    deny("us-west-2")
    with pytest.raises(ConfigError, match=f"service-quotas us-west-2 ec2/{P}: AccessDenied"):
        source.vcpu_limit("us-west-2", P)


def test_a_failing_service_is_unavailable(quotas):
    source, _, fail = quotas
    fail("us-west-2")
    with pytest.raises(ProviderUnavailable, match="us-west-2"):
        source.vcpu_limit("us-west-2", P)


def test_a_service_that_does_not_answer_is_unavailable_within_its_deadline():
    with HangingServer() as hanging:
        source = AwsServiceQuotas(hanging.url, deadline_s=0.5)
        began = time.monotonic()
        with pytest.raises(ProviderUnavailable, match="service-quotas us-west-2"):
            source.vcpu_limit("us-west-2", P)
    assert time.monotonic() - began < 5  # two attempts of 0.5 s and a backoff, not a minute


def test_moto_has_no_ec2_quota_so_the_fake_and_the_stub_hold_them(s3_endpoint):
    with pytest.raises(NotFound, match="NoSuchResource"):
        AwsServiceQuotas(s3_endpoint).vcpu_limit("us-west-2", P)


def test_each_aws_gpu_place_gets_its_familys_pool_and_the_vcpus_of_one_gpu():
    asked = [
        ("aws/us-east-1", "H100"),
        ("aws/us-west-2", "L4"),
        ("aws/us-east-1", "L4"),
        ("gcp/us-central1", "H100"),
    ]
    assert aws_shapes(asked) == {
        ("aws/us-east-1", "H100"): InstanceShape("us-east-1", P, 24.0, 8),  # p5.48xlarge
        ("aws/us-west-2", "L4"): InstanceShape("us-west-2", "L-DB2E81BA", 12.0, 4),  # g6.12xlarge
    }  # no L4 in the catalog's us-east-1; another cloud has no Service Quotas
