"""Prestage onto an S3-compatible secondary (Cloudflare R2, MinIO: `endpoint_url`), on moto.

Every store a failover opens goes through `lifeboat_dr.flows.wiring.store_opener`, which keeps the site's
endpoint: the weights' source on the primary's endpoint, their destination under the
secondary's. Before it, the destination (the secondary's bucket root) opened with no
endpoint, i.e. against AWS.
"""

import boto3
import pytest

from lifeboat_dr.flows.wiring import providers_for, spec_for, store_opener
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.testing.emulators import new_s3_bucket

pytestmark = pytest.mark.integration


@pytest.fixture
def r2_runbook(s3_endpoint, monkeypatch):
    # Nothing may fall back to AWS: no default endpoint is reachable from a test anyway.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    primary, secondary = new_s3_bucket(s3_endpoint), new_s3_bucket(s3_endpoint)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    for i in range(3):
        s3.put_object(Bucket=primary, Key=f"weights/llama/shard-{i}.safetensors", Body=b"w" * (1000 + i))
    return (
        Runbook.model_validate(
            {
                "name": "r2-standby",
                "workload": "finetuning",
                "primary": {
                    "infra": "aws/us-east-1",
                    "store": f"s3://{primary}/ckpt",
                    "endpoint_url": s3_endpoint,
                },
                "secondary": {
                    "infra": "local",
                    "store": f"s3://{secondary}/ckpt",
                    "endpoint_url": s3_endpoint,
                    "candidates": [{"infra": "local"}],
                },
                "job": {"command": "true"},
                "checkpoint": {"cadence": "30m"},
                "prestage": {"weights": [f"s3://{primary}/weights/llama"]},
            }
        ),
        s3,
        secondary,
    )


def test_prestage_onto_an_s3_compatible_secondary_uses_its_endpoint(r2_runbook):
    rb, s3, secondary = r2_runbook
    providers = providers_for(rb, registry=FakeRegistry({}))
    readiness = spec_for(rb, providers).prestage()
    assert readiness.ready, readiness.items
    staged = s3.list_objects_v2(Bucket=secondary, Prefix="ckpt/prestage/")["Contents"]
    assert len(staged) == 3


def test_the_store_opener_gives_each_bucket_its_sites_endpoint(r2_runbook):
    rb, _, secondary = r2_runbook
    opener = store_opener(rb)
    assert opener(f"s3://{secondary}").endpoint_url == rb.secondary.endpoint_url
    assert opener("s3://someone-elses-bucket/x").endpoint_url is None  # not a site's: AWS itself
