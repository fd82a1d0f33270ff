"""What each real router does beyond the contract: HAProxy routes real requests and sees a dead
server; Route 53 keeps a record's values and health check when only its weight changes."""

import json
import urllib.request

import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.traffic.base import switch
from lifeboat_dr.providers.traffic.haproxy import HaproxyTraffic

from .conftest import SITES, make_route53


def _served_by(frontend: str) -> str:
    req = urllib.request.Request(
        f"{frontend}/v1/infer", data=json.dumps({"prompt": "hi"}).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["server"]


def _router(lb):
    return HaproxyTraffic(lb.socket, lb.backend, {s: f"srv-{s}" for s in SITES})


@pytest.mark.integration
def test_haproxy_sends_requests_where_the_weights_say(haproxy):
    assert {_served_by(haproxy.frontend) for _ in range(6)} == {"primary"}
    switch(_router(haproxy), "standby")
    assert {_served_by(haproxy.frontend) for _ in range(6)} == {"standby"}


@pytest.mark.integration
def test_haproxy_health_sees_a_dead_server_down(haproxy, toy_urls):
    import time

    router = _router(haproxy)
    deadline = time.monotonic() + 5
    while router.health()["primary"].state != "up" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert router.health()["primary"].state == "up"
    # point the standby's server at a port nobody listens on: its checks fail
    router._send(f"set server {haproxy.backend}/srv-standby addr 127.0.0.1 port 9")
    deadline = time.monotonic() + 5
    while router.health()["standby"].state != "down" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert router.health()["standby"].state == "down"
    assert "DOWN" in router.health()["standby"].detail


@pytest.mark.parametrize("name", ["chat; shutdown sessions server chat/srv", "chat\nset", ""])
def test_haproxy_refuses_a_name_that_would_add_commands(name):
    with pytest.raises(ConfigError, match="not a backend/server name"):
        HaproxyTraffic("/tmp/x.sock", name or "chat", {"primary": name or "srv one"})


@pytest.mark.integration
def test_route53_changes_only_the_weight_of_a_record(s3_endpoint):
    router, client, zone_id = make_route53(s3_endpoint)
    before = {
        r.get("SetIdentifier"): r
        for r in client.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
    }
    switch(router, "standby")
    after = {
        r.get("SetIdentifier"): r
        for r in client.list_resource_record_sets(HostedZoneId=zone_id)["ResourceRecordSets"]
    }
    for sid in ("chat-primary", "chat-standby"):
        assert {k: v for k, v in after[sid].items() if k != "Weight"} == {
            k: v for k, v in before[sid].items() if k != "Weight"
        }
    assert (after["chat-primary"]["Weight"], after["chat-standby"]["Weight"]) == (0, 255)


@pytest.mark.integration
def test_route53_health_is_the_records_health_check_or_unknown(s3_endpoint):
    with_checks = make_route53(s3_endpoint)[0].health()
    assert {h.state for h in with_checks.values()} <= {"up", "down"}
    without = make_route53(s3_endpoint, with_health_checks=False)[0].health()
    assert {h.state for h in without.values()} == {"unknown"}


@pytest.mark.integration
def test_route53_names_a_missing_record(s3_endpoint):
    from lifeboat_dr.kernel.errors import NotFound
    from lifeboat_dr.providers.traffic.route53 import Route53Traffic

    router, _, zone_id = make_route53(s3_endpoint)
    ghost = Route53Traffic(
        zone_id, "chat.example.com", {"primary": "chat-primary", "dr": "chat-dr"}, endpoint_url=s3_endpoint
    )
    with pytest.raises(NotFound, match="chat-dr"):
        ghost.weights()


@pytest.mark.integration
def test_haproxy_with_a_server_it_does_not_have_changes_nothing(haproxy):
    from lifeboat_dr.kernel.errors import NotFound

    ghost = HaproxyTraffic(haproxy.socket, haproxy.backend, {"primary": "srv-primary", "dr": "srv-gone"})
    with pytest.raises(NotFound, match="srv-gone"):
        ghost.set_weights({"primary": 0, "dr": 255})
    assert _router(haproxy).weights() == {"primary": 255, "standby": 0}
