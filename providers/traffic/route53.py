"""A Route 53 weighted record set as a traffic router, through boto3. See base.py.

Each site is one weighted record of the same name and type, told apart by its
`SetIdentifier` (`sites={"use4": "chat-use4"}`). A change is one `ChangeResourceRecordSets`
batch of UPSERTs that keep each record's values, TTL and health check and change only its
`Weight`: Route 53 applies a batch atomically. Health is the status of the record's health
check (`GetHealthCheckStatus`: every checker reporting Success is up); a record without one
is unknown. Clients see a change only after their resolvers' cached answer expires (the
record's TTL): keep it short for records you fail over. This module owns boto3 for Route 53;
`endpoint_url` points it at moto in tests.
"""

from __future__ import annotations

from collections.abc import Mapping

from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.traffic.base import SiteHealth, check_weights

_NOT_FOUND = {"NoSuchHostedZone", "NoSuchHealthCheck", "InvalidChangeBatch"}
_RETRYABLE = {"Throttling", "ThrottlingException", "PriorRequestNotComplete", "ServiceUnavailable"}


class Route53Traffic:
    def __init__(
        self,
        zone_id: str,
        record: str,
        sites: Mapping[str, str],
        *,
        record_type: str = "A",
        endpoint_url: str | None = None,
    ):
        if not sites:
            raise ConfigError("route53 router: no sites (site -> SetIdentifier) given")
        self.zone_id, self.record_type = zone_id, record_type
        self.record = record if record.endswith(".") else record + "."
        self._ids = dict(sites)  # site -> SetIdentifier
        self.endpoint_url = endpoint_url
        self.where = f"route53 {zone_id} {self.record} {record_type}"
        self._client_obj = None

    def sites(self) -> tuple[str, ...]:
        return tuple(self._ids)

    def weights(self) -> dict[str, int]:
        return {site: int(rec["Weight"]) for site, rec in self._records().items()}

    def set_weights(self, weights: Mapping[str, int]) -> None:
        check_weights(self.sites(), weights, self.where)
        if not weights:
            return
        records = self._records()
        changes = [
            {"Action": "UPSERT", "ResourceRecordSet": {**records[site], "Weight": w}}
            for site, w in weights.items()
        ]
        self._call(
            "change_resource_record_sets",
            HostedZoneId=self.zone_id,
            ChangeBatch={"Comment": "lifeboat traffic switch", "Changes": changes},
        )

    def health(self) -> dict[str, SiteHealth]:
        out = {}
        for site, rec in self._records().items():
            check = rec.get("HealthCheckId")
            if not check:
                out[site] = SiteHealth(site, int(rec["Weight"]), "unknown", "no health check")
                continue
            answer = self._call("get_health_check_status", HealthCheckId=check)
            reports = [o["StatusReport"]["Status"] for o in answer.get("HealthCheckObservations", [])]
            up = bool(reports) and all(r.startswith("Success") for r in reports)
            detail = reports[0] if reports else "no observations"
            out[site] = SiteHealth(site, int(rec["Weight"]), "up" if up else "down", detail)
        return out

    def _records(self) -> dict[str, dict]:
        """site -> its record set, exactly as Route 53 returns it."""
        found: dict[str, dict] = {}
        kwargs = {"StartRecordName": self.record, "StartRecordType": self.record_type}
        while True:
            page = self._call("list_resource_record_sets", HostedZoneId=self.zone_id, **kwargs)
            for rec in page["ResourceRecordSets"]:
                if rec["Name"] == self.record and rec["Type"] == self.record_type:
                    found[rec.get("SetIdentifier", "")] = rec
            past = page["ResourceRecordSets"] and page["ResourceRecordSets"][-1]["Name"] != self.record
            if not page.get("IsTruncated") or past:
                break
            kwargs = {"StartRecordName": page["NextRecordName"], "StartRecordType": page["NextRecordType"]}
            if page.get("NextRecordIdentifier"):
                kwargs["StartRecordIdentifier"] = page["NextRecordIdentifier"]
        missing = [sid for sid in self._ids.values() if sid not in found]
        if missing:
            raise NotFound(f"{self.where}: no weighted record {', '.join(missing)}")
        out = {site: found[sid] for site, sid in self._ids.items()}
        unweighted = [site for site, rec in out.items() if "Weight" not in rec]
        if unweighted:
            raise ConfigError(f"{self.where}: record of {', '.join(unweighted)} is not a weighted record")
        return out

    def _client(self):
        if self._client_obj is None:
            try:
                import boto3
            except ImportError:  # pragma: no cover - installed with lifeboat
                raise ConfigError("route53 traffic needs boto3: pip install boto3") from None
            from botocore.config import Config

            config = Config(
                retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=3, read_timeout=10
            )
            self._client_obj = boto3.client("route53", endpoint_url=self.endpoint_url, config=config)
        return self._client_obj

    def _call(self, operation: str, **kwargs):
        import botocore.exceptions

        try:
            return getattr(self._client(), operation)(**kwargs)
        except botocore.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            message = e.response.get("Error", {}).get("Message", "")
            if code in _NOT_FOUND:
                raise NotFound(f"{self.where}: {code}: {message}") from None
            if code in _RETRYABLE or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
                raise ProviderUnavailable(f"{self.where}: {code}: {message}") from None
            raise ConfigError(f"{self.where}: {code}: {message}") from None
        except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionError) as e:
            raise ProviderUnavailable(f"{self.where}: {e}") from None
