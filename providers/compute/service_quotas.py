"""The cloud's live GPU quota: AWS Service Quotas (EC2's vCPU limits per instance family), and its fake.

`QuotaSource.vcpu_limit(region, code)` is the quota applied to the account, in vCPUs. It raises
`NotFound` when the service has no such quota, `ProviderUnavailable` when it does not answer,
throttles or fails (the SDK's own retries spent), and `ConfigError` when the caller may not read
it (AccessDenied). `FakeServiceQuotas` keeps the same state and raises the same. moto serves
Service Quotas for `vpc` only, so EC2's codes exist only in the fake and in the loopback stub of
the API (`lifeboat_dr.testing.service_quotas_stub`), and a test says so.

`aws_shapes` reads, from the catalog the project ships, what one GPU of an AWS place costs of its
pool: the vCPUs per GPU of the instance type that carries the most of them there, and the pool
its family draws from.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, Protocol

from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable

AWS_CATALOG = Path(__file__).parent / "catalog" / "v8" / "aws" / "vms.csv"
# Running On-Demand instances of a family, in vCPUs: one pool per region for every type in it
FAMILY_QUOTA = {"p": "L-417A185B", "g": "L-DB2E81BA"}  # P; G and VT
_NOT_FOUND = {"NoSuchResourceException"}
_DENIED = {"AccessDeniedException", "AccessDenied", "UnrecognizedClientException"}


class InstanceShape(NamedTuple):
    """What one GPU of a place costs of its live pool: quota `code` in `region`."""

    region: str
    code: str
    vcpus_per_gpu: float
    gpus_per_instance: int

    @property
    def pool(self) -> str:
        return f"aws/{self.region} {self.code}"


class QuotaSource(Protocol):
    def vcpu_limit(self, region: str, code: str) -> float:
        """The applied EC2 quota `code` in `region`, in vCPUs."""
        ...


class AwsServiceQuotas:
    """Service Quotas through boto3 (imported at the first call); `endpoint_url` for a stub."""

    def __init__(self, endpoint_url: str | None = None, *, deadline_s: float = 5.0):
        self.endpoint_url, self.deadline_s = endpoint_url, deadline_s
        self._clients: dict[str, object] = {}

    def vcpu_limit(self, region: str, code: str) -> float:
        import botocore.exceptions

        where = f"service-quotas {region} ec2/{code}"
        try:
            answer = self._client(region).get_service_quota(ServiceCode="ec2", QuotaCode=code)
            return float(answer["Quota"]["Value"])
        except botocore.exceptions.ClientError as e:
            error = e.response.get("Error", {})
            said = f"{where}: {error.get('Code', '')}: {error.get('Message', '')}"
            if error.get("Code") in _NOT_FOUND:
                raise NotFound(said) from None
            if error.get("Code") in _DENIED:
                raise ConfigError(said) from None
            raise ProviderUnavailable(said) from None
        except (botocore.exceptions.BotoCoreError, KeyError, TypeError, ValueError) as e:
            raise ProviderUnavailable(f"{where}: {type(e).__name__}: {e}") from None

    def _client(self, region: str):
        if region not in self._clients:
            import boto3
            from botocore.config import Config

            config = Config(  # two attempts within the deadline, as the stores' (base.py)
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=self.deadline_s / 2,
                read_timeout=self.deadline_s / 2,
            )
            self._clients[region] = boto3.client(
                "service-quotas", region_name=region, endpoint_url=self.endpoint_url, config=config
            )
        return self._clients[region]


class FakeServiceQuotas:
    """Service Quotas in memory: `limits[(region, code)]` in vCPUs; `denied` regions answer
    AccessDenied and `down` ones do not answer, as the real adapter reports them."""

    def __init__(self, limits: dict[tuple[str, str], float] | None = None):
        self.limits = dict(limits or {})
        self.denied: set[str] = set()
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def vcpu_limit(self, region: str, code: str) -> float:
        self.calls.append((region, code))
        where = f"service-quotas {region} ec2/{code}"
        if region in self.down:
            raise ProviderUnavailable(f"{where}: could not connect")
        if region in self.denied:
            raise ConfigError(f"{where}: AccessDeniedException: not authorized to GetServiceQuota")
        if (region, code) not in self.limits:
            raise NotFound(f"{where}: NoSuchResourceException: the quota does not exist")
        return float(self.limits[(region, code)])


def aws_shapes(
    places: Iterable[tuple[str, str]], catalog: Path = AWS_CATALOG
) -> dict[tuple[str, str], InstanceShape]:
    """Each AWS place's shape, by (infra, GPU type) (none for a GPU type the catalog lacks
    there, or of a family without a known pool)."""
    wanted = {p for p in places if p[0].startswith("aws/")}
    found: dict[tuple[str, str], InstanceShape] = {}
    with open(catalog, newline="") as f:
        for row in csv.DictReader(f):
            place = (f"aws/{row['Region']}", row["AcceleratorName"])
            code = FAMILY_QUOTA.get(row["InstanceType"][:1])
            gpus = int(float(row["AcceleratorCount"] or 0))
            if place not in wanted or code is None or gpus < 1:
                continue
            if place not in found or found[place].gpus_per_instance < gpus:
                found[place] = InstanceShape(row["Region"], code, float(row["vCPUs"]) / gpus, gpus)
    return found
