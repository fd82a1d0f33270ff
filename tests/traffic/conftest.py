"""One router per backend, each routing a service across two sites: primary (all traffic)
and standby (none). HAProxy really runs on loopback in front of two toy model servers;
Route 53 is moto's, with a health check per record."""

import uuid

import pytest

from lifeboat_dr.standins.model_server import toy_server

SITES = ("primary", "standby")


@pytest.fixture
def weights_dir(tmp_path):
    d = tmp_path / "weights"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"toy weights" * 100)
    return d


@pytest.fixture
def toy_urls(weights_dir):
    with toy_server(weights_dir, "primary") as a, toy_server(weights_dir, "standby") as b:
        yield {"primary": a, "standby": b}


@pytest.fixture
def haproxy(toy_urls):
    from lifeboat_dr.providers.traffic.local_haproxy import local_haproxy

    servers = {}
    for i, (site, url) in enumerate(toy_urls.items()):
        host, port = url.removeprefix("http://").split(":")
        servers[f"srv-{site}"] = (host, int(port), 255 if i == 0 else 0)
    with local_haproxy("chat", servers) as lb:
        yield lb


def make_route53(endpoint: str, *, with_health_checks: bool = True):
    import boto3

    from lifeboat_dr.providers.traffic.route53 import Route53Traffic

    client = boto3.client("route53", endpoint_url=endpoint, region_name="us-east-1")
    zone = client.create_hosted_zone(Name="example.com.", CallerReference=uuid.uuid4().hex)
    zone_id = zone["HostedZone"]["Id"].split("/")[-1]
    changes = []
    for i, site in enumerate(SITES):
        record = {
            "Name": "chat.example.com.",
            "Type": "A",
            "SetIdentifier": f"chat-{site}",
            "Weight": 255 if i == 0 else 0,
            "TTL": 10,
            "ResourceRecords": [{"Value": f"10.0.0.{i + 1}"}],
        }
        if with_health_checks:
            check = client.create_health_check(
                CallerReference=uuid.uuid4().hex,
                HealthCheckConfig={
                    "IPAddress": f"10.0.0.{i + 1}",
                    "Port": 80,
                    "Type": "HTTP",
                    "ResourcePath": "/healthz",
                },
            )
            record["HealthCheckId"] = check["HealthCheck"]["Id"]
        changes.append({"Action": "CREATE", "ResourceRecordSet": record})
    client.change_resource_record_sets(HostedZoneId=zone_id, ChangeBatch={"Changes": changes})
    router = Route53Traffic(
        zone_id, "chat.example.com", {s: f"chat-{s}" for s in SITES}, endpoint_url=endpoint
    )
    return router, client, zone_id


@pytest.fixture(params=["fake", "haproxy", "route53"])
def backend(request):
    return request.param


@pytest.fixture
def router(request, backend):
    if backend == "fake":
        from lifeboat_dr.providers.traffic.fake import FakeTraffic

        return FakeTraffic({"primary": 255, "standby": 0})
    if backend == "haproxy":
        from lifeboat_dr.providers.traffic.haproxy import HaproxyTraffic

        lb = request.getfixturevalue("haproxy")
        return HaproxyTraffic(lb.socket, lb.backend, {s: f"srv-{s}" for s in SITES})
    return make_route53(request.getfixturevalue("s3_endpoint"))[0]


@pytest.fixture
def unreachable(backend, tmp_path):
    """A router of the same backend whose API does not answer."""
    if backend == "fake":
        from lifeboat_dr.providers.traffic.fake import FakeTraffic

        r = FakeTraffic({"primary": 255, "standby": 0})
        r.unavailable = True
        return r
    if backend == "haproxy":
        from lifeboat_dr.providers.traffic.haproxy import HaproxyTraffic

        return HaproxyTraffic(str(tmp_path / "gone.sock"), "chat", {s: f"srv-{s}" for s in SITES})
    from lifeboat_dr.providers.traffic.local_haproxy import free_port
    from lifeboat_dr.providers.traffic.route53 import Route53Traffic

    return Route53Traffic(
        "Z1",
        "chat.example.com",
        {s: f"chat-{s}" for s in SITES},
        endpoint_url=f"http://127.0.0.1:{free_port()}",
    )
