"""The Alertmanager receiver, fed recorded webhook bodies (tests/detect/payloads/)."""

from __future__ import annotations

import base64
import json
import logging

import anyio
import httpx
import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.alertmanager import AlertmanagerSettings, alertmanager_routes
from lifeboat_dr.shell.server import create_app

TOKEN = "s3cr3t-am-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def post_alert(app, data, headers) -> httpx.Response:
    if not isinstance(data, bytes | str):  # a stream: sent chunked, without Content-Length
        chunks = list(data)

        async def stream():
            for c in chunks:
                yield c

        data = stream()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as http:
        return await http.post("/alerts/alertmanager", content=data, headers=headers)


class Receiver:
    """The app with recording stand-ins for the Prefect API."""

    def __init__(self, guarded_path, state_dir, clock, **settings):
        self.events, self.cancels, self.pending = [], [], ["run-1"]
        base = {"bearer_token": TOKEN, "runbooks": [guarded_path], "state_dir": state_dir}
        s = AlertmanagerSettings(**{**base, **settings})

        async def cancel(deployment, runbook, aliases, reason):
            self.cancels.append((deployment, runbook, reason))
            pending, self.pending = self.pending, []
            return pending

        self.app = create_app(
            alertmanager_routes(s, emit_event=self.events.append, cancel=cancel, clock=clock)
        )

    def post(self, body, headers=BEARER):
        data = json.dumps(body) if isinstance(body, dict) else body
        return anyio.run(post_alert, self.app, data, headers)

    def post_groups(self, body, headers=BEARER):
        """`body`'s alerts as Alertmanager sends them with `group_by: [alertname]`: one
        webhook per alert, each its own group (an independent source); the last response."""
        return [self.post(group, headers) for group in one_group_per_alert(body)][-1]

    def kinds(self):
        return [e.event for e in self.events]


def one_group_per_alert(body: dict) -> list[dict]:
    return [
        body | {"groupKey": f'{{}}:{{alertname="{a["labels"]["alertname"]}"}}', "alerts": [a]}
        for a in body["alerts"]
    ]


@pytest.fixture
def receiver(guarded_path, tmp_path, clock):
    return Receiver(guarded_path, tmp_path, clock)


def test_one_group_carrying_two_signals_is_one_source_and_does_not_confirm(receiver, payload):
    """The attack: one webhook, one group, two alerts labelled with two signals."""
    r = receiver.post(payload("firing_two_signals"))
    assert r.status_code == 200, r.text
    assert receiver.kinds() == ["lifeboat.alert.firing", "lifeboat.alert.firing", "lifeboat.outage.suspected"]
    assert r.json()["runbooks"] == {
        "guarded": "suspected: 2 signal(s) fail (alertmanager, gpu_health) but from 1 independent "
        "source(s); 1 of 2 count"
    }
    decision = receiver.events[-1].payload["decision"]
    assert decision["independent"] == 1
    assert decision["sources"] == ['alertmanager-group:{}/{severity="critical"}:{cluster="train-use1"}']


def test_the_same_group_sent_again_never_becomes_a_second_source(receiver, payload, clock):
    receiver.post(payload("firing_two_signals"))
    clock.advance(minutes=1)
    receiver.post(payload("firing_two_signals"))  # Alertmanager's group_interval re-send
    assert "lifeboat.outage.confirmed" not in receiver.kinds()


def test_two_alerts_of_different_signals_in_two_groups_confirm_the_outage(receiver, payload):
    r = receiver.post_groups(payload("firing_two_signals"))
    assert r.status_code == 200, r.text
    assert receiver.kinds() == [
        "lifeboat.alert.firing",
        "lifeboat.outage.suspected",
        "lifeboat.alert.firing",
        "lifeboat.outage.confirmed",
    ]
    confirmed = receiver.events[-1]
    assert confirmed.resource["prefect.resource.id"] == "lifeboat.runbook.guarded"
    assert confirmed.resource["lifeboat.runbook.path"].endswith("guarded.yaml")
    assert confirmed.payload["decision"]["voting"] == ["alertmanager", "gpu_health"]
    assert confirmed.payload["evidence"] == [
        "alertmanager: TrainingStepStalled firing: no optimizer step for 12m on job llama-70b "
        "(alertmanager:0f1e2d3c4b5a6978, 2026-03-01T12:00:00Z)",
        "gpu_health: DCGMXidCritical firing: XID 79 on node gpu-017 GPU 3: fallen off the bus "
        "(alertmanager:a1b2c3d4e5f60718, 2026-03-01T12:00:00Z)",
    ]
    assert confirmed.payload["outage_started_at"] == "2026-03-01T11:58:30Z"
    assert r.json()["runbooks"] == {"guarded": "confirmed: 2 of 2 signal(s) agree (alertmanager, gpu_health)"}


def test_one_alert_alone_is_only_suspected(receiver, payload):
    assert receiver.post(payload("firing_one_signal")).status_code == 200
    assert receiver.kinds() == ["lifeboat.alert.firing", "lifeboat.outage.suspected"]


def test_the_same_group_and_fingerprint_twice_is_one_event(receiver, payload):
    receiver.post(payload("firing_two_signals"))
    again = receiver.post(payload("firing_two_signals"))  # Alertmanager re-sends every group_interval
    assert again.json()["duplicates"] == 2 and again.json()["events"] == 0
    assert receiver.kinds().count("lifeboat.alert.firing") == 2


def test_with_endpoint_scope_two_groups_need_a_probe_to_confirm(guarded_path, tmp_path, clock, payload):
    """`source_scope: endpoint`: whoever holds the webhook token cannot confirm alone, however
    many group keys they invent; the heartbeat probe (the watch flow) is the second source."""
    from lifeboat_dr.core.detection.log import SignalLog
    from lifeboat_dr.core.detection.quorum import QuorumPolicy
    from lifeboat_dr.core.detection.signals import Reading, Status

    rx = Receiver(guarded_path, tmp_path, clock, source_scope="endpoint")
    r = rx.post_groups(payload("firing_two_signals"))
    assert "lifeboat.outage.confirmed" not in rx.kinds()
    assert r.json()["runbooks"]["guarded"].endswith("but from 1 independent source(s); 1 of 2 count")
    stall = Reading("training_progress", "heartbeat", Status.failing, clock(), "no step for 11m")
    policy = QuorumPolicy(signals=("gpu_health", "training_progress", "provider", "alertmanager"))
    decision = SignalLog("guarded", tmp_path, clock=clock).observe([stall], policy)
    assert decision.state == "confirmed" and decision.sources == ("alertmanager", "heartbeat")


def test_the_source_scope_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE", "endpoint")
    assert AlertmanagerSettings.from_env(bearer_token=TOKEN).source_scope == "endpoint"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Token {TOKEN}"},
        {"Authorization": "Basic " + base64.b64encode(b"am:" + TOKEN.encode()).decode()},
        {"Authorization": "Basic !!not-base64!!"},
    ],
    ids=["none", "wrong-bearer", "wrong-scheme", "basic-not-configured", "garbage-basic"],
)
def test_wrong_or_missing_credentials_get_401_and_no_event(receiver, payload, headers):
    r = receiver.post(payload("firing_two_signals"), headers=headers)
    assert r.status_code == 401 and "Bearer" in r.headers["www-authenticate"]
    assert receiver.events == []


def test_basic_auth_works_when_configured(guarded_path, tmp_path, clock, payload):
    rx = Receiver(guarded_path, tmp_path, clock, bearer_token=None, basic_username="am", basic_password="pw")
    good = {"Authorization": "Basic " + base64.b64encode(b"am:pw").decode()}
    bad = {"Authorization": "Basic " + base64.b64encode(b"am:nope").decode()}
    assert rx.post(payload("firing_one_signal"), headers=bad).status_code == 401
    assert rx.post(payload("firing_one_signal"), headers=good).status_code == 200


def test_a_receiver_without_credentials_refuses_to_start(guarded_path):
    with pytest.raises(ConfigError, match="LIFEBOAT_ALERTMANAGER_TOKEN"):
        alertmanager_routes(AlertmanagerSettings(runbooks=[guarded_path]))


def test_the_token_never_appears_in_logs_or_settings_repr(receiver, payload, caplog):
    caplog.set_level(logging.DEBUG)
    receiver.post(payload("truncated"))
    receiver.post(payload("firing_two_signals"), headers={"Authorization": "Bearer wrong"})
    settings = AlertmanagerSettings.from_env(bearer_token=TOKEN)
    assert TOKEN not in caplog.text and TOKEN not in repr(settings)


def test_malformed_payload_gets_400_naming_the_fields(receiver, payload):
    r = receiver.post(payload("malformed"))
    assert r.status_code == 400
    problems = r.json()["problems"]
    assert any(p.startswith("version:") for p in problems)
    assert any(p.startswith("alerts.0.fingerprint:") for p in problems)
    assert any(p.startswith("alerts.0.startsAt:") for p in problems)


def test_a_body_that_is_not_json_gets_400(receiver):
    r = receiver.post(b"{not json")
    assert r.status_code == 400 and r.json()["error"].startswith("body is not JSON")


def test_an_alert_storm_over_the_size_limit_gets_413(guarded_path, tmp_path, clock, payload):
    rx = Receiver(guarded_path, tmp_path, clock, max_body_bytes=16 * 1024)
    assert rx.post(payload("too_large")).status_code == 413
    assert rx.events == []


def test_an_oversized_body_without_content_length_is_cut_off_too(guarded_path, tmp_path, clock, payload):
    rx = Receiver(guarded_path, tmp_path, clock, max_body_bytes=16 * 1024)
    body = json.dumps(payload("too_large")).encode()
    chunks = (body[i : i + 4096] for i in range(0, len(body), 4096))
    assert rx.post(chunks).status_code == 413


def test_truncated_alerts_are_reported_and_kept_as_evidence(receiver, payload):
    r = receiver.post(payload("truncated"))
    assert r.json()["truncated"] == 17
    assert receiver.events[0].payload["reading"]["evidence"]["truncated_alerts"] == 17


def test_resolved_alerts_cancel_the_pending_failover(receiver, payload, clock):
    receiver.post_groups(payload("firing_two_signals"))
    clock.advance(minutes=2)
    r = receiver.post(payload("resolved"))
    assert r.json()["cancelled"] == ["run-1"]
    deployment, runbook, reason = receiver.cancels[0]
    assert (deployment, runbook) == ("failover/failover", "guarded") and reason.startswith("alert resolved")
    assert receiver.kinds()[-2:] == ["lifeboat.alert.resolved", "lifeboat.alert.resolved"]


def test_a_resolved_alert_does_not_cancel_while_other_signals_still_confirm(receiver, payload, clock):
    receiver.post_groups(payload("firing_two_signals"))
    one = payload("firing_one_signal")
    one["alerts"][0]["labels"]["lifeboat_signal"] = "provider"
    one["alerts"][0]["fingerprint"] = "77aa77aa77aa77aa"
    receiver.post(one)  # a third signal joins: provider
    resolved = payload("resolved")
    resolved["alerts"] = resolved["alerts"][:1]  # only the XID alert resolves
    r = receiver.post(resolved)
    assert r.json()["cancelled"] == [] and receiver.cancels == []


def test_alerts_for_a_runbook_this_receiver_does_not_guard_are_ignored(receiver, payload):
    body = payload("firing_one_signal")
    body["alerts"][0]["labels"]["lifeboat_runbook"] = "someone-else"
    r = receiver.post(body)
    assert r.status_code == 200 and r.json()["ignored"][0]["why"] == "no runbook 'someone-else' here"
    assert receiver.events == []


def test_after_a_cancelled_failover_a_renewed_quorum_fails_over_again(receiver, payload, clock):
    receiver.post_groups(payload("firing_two_signals"))
    clock.advance(minutes=2)
    receiver.post(payload("resolved"))  # cancelled before approval
    clock.advance(minutes=1)
    refire = payload("firing_two_signals")
    for a in refire["alerts"]:
        a["startsAt"] = "2026-03-01T12:02:30Z"  # a new firing of the same alerts
    receiver.post_groups(refire)
    confirmed = [e for e in receiver.events if e.event == "lifeboat.outage.confirmed"]
    assert len(confirmed) == 2 and confirmed[0].id != confirmed[1].id


def test_while_the_failover_is_already_running_a_flapping_alert_does_not_start_another(
    receiver, payload, clock
):
    receiver.pending = []  # the worker picked the run up: nothing pending to cancel
    receiver.post_groups(payload("firing_two_signals"))
    clock.advance(minutes=1)
    receiver.post(payload("resolved"))
    clock.advance(minutes=1)
    refire = payload("firing_two_signals")
    for a in refire["alerts"]:
        a["startsAt"] = "2026-03-01T12:01:30Z"
    receiver.post_groups(refire)
    assert receiver.kinds().count("lifeboat.outage.confirmed") == 1
