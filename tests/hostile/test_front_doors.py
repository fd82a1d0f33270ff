"""Hostile requests into both front doors, `/slack/actions` and `/alerts/alertmanager`,
served by real uvicorn on loopback. Every attack gets a 4xx with a one-line reason, the
app never logs an error, nothing reaches Prefect or Slack, and an oversized body is
refused after at most one chunk past the cap (the app's own byte count says so)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import SecretStr

from lifeboat_dr.shell.alertmanager import AlertmanagerSettings, alertmanager_routes
from lifeboat_dr.shell.server import create_app
from lifeboat_dr.shell.slack_actions import SlackSettings, slack_routes
from lifeboat_dr.shell.slack_request import signature
from tests.approval.slack_stub import SlackStub

from .conftest import LiveServer, raw_request

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "am-token-for-hostile-tests"
RUN = "8d4c1a52-0000-4000-8000-000000000001"
GUARDED = "tests/detect/runbooks/guarded.yaml"
CAP = 64 * 1024
MB = 1 << 20


@pytest.fixture(scope="module")
def doors(tmp_path_factory):
    """Both receivers on one server, as `lifeboat serve` mounts them; Prefect and Slack
    replaced by recorders (the stub is Slack's real Web API shape)."""
    resumed, events, cancels = [], [], []

    async def cancel(*args):
        cancels.append(args)
        return []

    with SlackStub() as stub:
        slack = SlackSettings(
            signing_secret=SecretStr(SECRET),
            bot_token=SecretStr("xoxb-test"),
            base_url=stub.base_url,
            approvers={"guarded": ["U0ALICE"]},
            channels={"guarded": "C0INCIDENT"},
            max_body_bytes=CAP,
        )
        alerts = AlertmanagerSettings(
            bearer_token=TOKEN,
            runbooks=[GUARDED],
            state_dir=tmp_path_factory.mktemp("state"),
            max_body_bytes=CAP,
        )
        ask = {"run_id": RUN, "runbook": "guarded", "action": "failover", "epoch": 1}
        routes = slack_routes(
            slack,
            signing_key=Ed25519PrivateKey.generate(),
            resume=lambda run, data: resumed.append((run, data)),
            ask=lambda run: ask,
        )
        routes += alertmanager_routes(alerts, emit_event=events.append, cancel=cancel)
        with LiveServer(create_app(routes)) as live:
            live.stub, live.resumed, live.events, live.cancels = stub, resumed, events, cancels
            yield live


@pytest.fixture
def door(doors, no_server_errors):
    doors.stub.calls.clear()
    doors.resumed.clear()
    doors.events.clear()
    yield doors
    assert doors.resumed == [] and doors.stub.calls == [] and doors.events == []


# --- Slack -----------------------------------------------------------------------------


def click(**overrides) -> dict:
    payload = {
        "type": "block_actions",
        "user": {"id": "U0ALICE"},
        "channel": {"id": "C0INCIDENT"},
        "container": {"type": "message", "channel_id": "C0INCIDENT", "message_ts": "1001.0001"},
        "message": {"ts": "1001.0001", "blocks": []},
        "actions": [
            {"action_id": "lifeboat_approve", "value": json.dumps({"run_id": RUN, "runbook": "guarded"})}
        ],
    }
    return payload | overrides


def form(payload) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return urlencode({"payload": text}).encode()


def slack_head(body_length: int | None, *, ts: str | None = None, sig: str | None = None, extra=()) -> str:
    lines = [
        "POST /slack/actions HTTP/1.1",
        "Host: lifeboat",
        "Content-Type: application/x-www-form-urlencoded",
    ]
    if ts is not None:
        lines.append(f"X-Slack-Request-Timestamp: {ts}")
    if sig is not None:
        lines.append(f"X-Slack-Signature: {sig}")
    if body_length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {body_length}")
    return "\r\n".join([*lines, *extra, ""])


def signed(body: bytes, *, secret: str = SECRET, at: float | None = None) -> tuple[str, list[bytes]]:
    """The request Slack would send: v0 HMAC-SHA256 over `v0:{ts}:{raw body}`."""
    ts = str(int(time.time() if at is None else at))
    sig = "v0=" + hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return slack_head(len(body), ts=ts, sig=sig), [body]


def endless(size: int = 100 * MB, chunk: int = 64 * 1024):
    for _ in range(size // chunk):
        yield b"a" * chunk


def deep(n: int) -> str:
    return "[" * n + "]" * n


SLACK_ATTACKS = {
    "no X-Slack headers": (lambda: (slack_head(len(form(click()))), [form(click())]), 401, "missing X-Slack"),
    "timestamp not a number": (
        lambda: (slack_head(9, ts="yesterday", sig="v0=00"), [b"payload=x"]),
        401,
        "not a Unix time",
    ),
    "signature not v0": (lambda: (slack_head(9, ts="1", sig="sha1=abc"), [b"payload=x"]), 401, "not a v0"),
    "wrong signing secret": (lambda: signed(form(click()), secret="guessed"), 401, "invalid signature"),
    "six-minute-old timestamp (replay)": (
        lambda: signed(form(click()), at=time.time() - 360),
        401,
        "5-minute window",
    ),
    "Content-Length 100 MB, no body sent": (
        lambda: (slack_head(100 * MB, ts="1", sig="v0=00"), []),
        413,
        "body over 65536 bytes",
    ),
    "signed, invalid UTF-8": (lambda: signed(b"payload=\xff\xfe{}"), 400, "not valid UTF-8"),
    "signed, percent-encoded invalid UTF-8": (lambda: signed(b"payload=%FF%FE"), 400, "not a form"),
    "signed, no payload field": (lambda: signed(b"token=x"), 400, "no payload field"),
    "signed, payload given twice": (lambda: signed(form(click()) + b"&" + form(click())), 400, "given twice"),
    "signed, payload not JSON": (lambda: signed(form("{not json")), 400, "payload is not JSON"),
    "signed, payload nested 20,000 deep": (
        lambda: signed(b"payload=" + deep(20_000).encode()),
        400,
        "nested too deeply",
    ),
    "signed, payload nested 40 deep": (lambda: signed(form(deep(40))), 400, "nested too deeply"),
    "signed, 5,000-digit integer": (lambda: signed(form('{"n": ' + "9" * 5000 + "}")), 400, "not JSON"),
    "signed, NaN": (lambda: signed(form('{"n": NaN}')), 400, "NaN is not a JSON number"),
    "signed, lone surrogate in user id": (
        lambda: signed(form(json.dumps(click()).replace("U0ALICE", "\\ud800"))),
        400,
        "lone surrogate",
    ),
    "signed, payload a list": (lambda: signed(form([1, 2])), 400, "not a Slack block action"),
    "signed, user a string": (lambda: signed(form(click(user="U0ALICE"))), 400, "user"),
    "signed, actions a dict": (lambda: signed(form(click(actions={"0": {}}))), 400, "actions"),
    "signed, actions empty": (lambda: signed(form(click(actions=[]))), 400, "actions"),
    "signed, action_id a number": (
        lambda: signed(form(click(actions=[{"action_id": 7, "value": "{}"}]))),
        400,
        "actions.0.action_id",
    ),
    "signed, runbook a list": (
        lambda: signed(
            form(
                click(
                    actions=[
                        {
                            "action_id": "lifeboat_approve",
                            "value": json.dumps({"run_id": RUN, "runbook": ["guarded"]}),
                        }
                    ]
                )
            )
        ),
        400,
        "value.runbook",
    ),
    "signed, run id not a UUID": (
        lambda: signed(
            form(
                click(
                    actions=[
                        {
                            "action_id": "lifeboat_approve",
                            "value": json.dumps({"run_id": "../../api/admin", "runbook": "guarded"}),
                        }
                    ]
                )
            )
        ),
        400,
        "not a flow run id",
    ),
    "signed, blocks not objects": (
        lambda: signed(form(click(message={"ts": "1001.0001", "blocks": ["x", 1]}))),
        400,
        "message.blocks.0",
    ),
    "signed, no channel anywhere": (
        lambda: signed(form(click(channel=None, container={}))),
        400,
        "no channel",
    ),
}


@pytest.mark.parametrize("attack", SLACK_ATTACKS, ids=list(SLACK_ATTACKS))
def test_slack_actions_refuses(door, attack):
    build, status, reason = SLACK_ATTACKS[attack]
    head, chunks = build()
    answer = raw_request(door.port, head, chunks)
    assert (answer.status, reason in answer.body) == (status, True), answer.body


def test_slack_actions_refuses_a_declared_100_mb_body_before_reading_it(door):
    answer = raw_request(door.port, slack_head(100 * MB, ts="1", sig="v0=00"), endless())
    assert answer.status == 413 and door.app.read[-1] == 0 and answer.sent < 100 * MB


def test_slack_actions_cuts_off_an_endless_chunked_body_at_the_cap(door):
    head = slack_head(None, ts=str(int(time.time())), sig="v0=" + "0" * 64)
    answer = raw_request(door.port, head, endless(), chunked=True)
    assert answer.status == 413 and "body over" in answer.body
    # stopped at the first message past the cap: uvicorn hands the app what one read of the
    # socket gave (64 KiB, coalesced to a few hundred KiB under load), never the whole body
    assert CAP < door.app.read[-1] <= CAP + 512 * 1024
    assert answer.sent < 100 * MB  # answered while the attacker was still sending


def test_a_correctly_signed_click_still_goes_through(doors, no_server_errors):
    """The control: the same signing code and server accept Slack's real scheme."""
    doors.resumed.clear()
    head, chunks = signed(form(click()))
    assert raw_request(doors.port, head, chunks).status == 200
    deadline = time.monotonic() + 10
    while not doors.stub.called("chat.update") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert doors.resumed[0][0] == RUN and doors.resumed[0][1]["approver"] == "U0ALICE"


def test_our_signature_is_slacks(doors):
    from slack_sdk.signature import SignatureVerifier

    body = form(click()).decode()
    assert signature(SECRET, "1700000000", body.encode()) == SignatureVerifier(SECRET).generate_signature(
        timestamp="1700000000", body=body
    )


# --- Alertmanager ----------------------------------------------------------------------


def am_head(body_length: int | None, auth: str | None = f"Bearer {TOKEN}", extra=()) -> str:
    lines = ["POST /alerts/alertmanager HTTP/1.1", "Host: lifeboat", "Content-Type: application/json"]
    if auth is not None:
        lines.append(f"Authorization: {auth}")
    lines.append("Transfer-Encoding: chunked" if body_length is None else f"Content-Length: {body_length}")
    return "\r\n".join([*lines, *extra, ""])


def am(body: bytes | str, auth: str | None = f"Bearer {TOKEN}"):
    data = body.encode() if isinstance(body, str) else body
    return am_head(len(data), auth), [data]


def webhook(**overrides) -> str:
    alert = {
        "status": "firing",
        "labels": {"alertname": "DCGMXidCritical", "lifeboat_runbook": "guarded"},
        "startsAt": "2026-03-01T11:58:30Z",
        "fingerprint": "a1b2c3d4e5f60718",
    }
    body = {
        "version": "4",
        "groupKey": "{}:{}",
        "status": "firing",
        "receiver": "lifeboat",
        "alerts": [alert],
    }
    return json.dumps(body | overrides)


AM_ATTACKS = {
    "no Authorization": (lambda: am(webhook(), auth=None), 401, "unauthorized"),
    "wrong bearer token": (lambda: am(webhook(), auth="Bearer guess"), 401, "unauthorized"),
    "Basic with non-UTF-8 credentials": (lambda: am(webhook(), auth="Basic //79/g=="), 401, "unauthorized"),
    "Content-Length 100 MB, no body sent": (lambda: (am_head(100 * MB), []), 413, "body over 65536 bytes"),
    "empty body": (lambda: am(b""), 400, "not JSON"),
    "invalid UTF-8": (lambda: am(b'{"version": "4\xff"}'), 400, "not valid UTF-8"),
    "not JSON": (lambda: am("{not json"), 400, "not JSON"),
    "nested 20,000 deep": (lambda: am(deep(20_000)), 400, "nested too deeply"),
    "nested 40 deep in a label": (
        lambda: am(webhook(groupLabels={"a": json.loads(deep(40))})),
        400,
        "nested too deeply",
    ),
    "5,000-digit integer": (
        lambda: am(webhook()[:-1] + ', "truncatedAlerts": ' + "9" * 5000 + "}"),
        400,
        "not JSON",
    ),
    "NaN truncatedAlerts": (lambda: am(webhook()[:-1] + ', "truncatedAlerts": NaN}'), 400, "NaN"),
    "lone surrogate in a label": (
        lambda: am(webhook().replace("DCGMXidCritical", "\\udfff")),
        400,
        "surrogate",
    ),
    "top level a list": (lambda: am("[]"), 400, "not an Alertmanager v4 webhook"),
    "alerts a string": (lambda: am(webhook(alerts="all of them")), 400, "not an Alertmanager v4 webhook"),
    "label value a number": (
        lambda: am(webhook().replace('"lifeboat_runbook": "guarded"', '"lifeboat_runbook": 7')),
        400,
        "not an Alertmanager v4 webhook",
    ),
    "endsAt past year 9999 in UTC": (
        lambda: am(
            webhook().replace('"fingerprint"', '"endsAt": "9999-12-31T23:59:59-12:00", "fingerprint"')
        ),
        400,
        "not an Alertmanager v4 webhook",
    ),
    "startsAt before year 1 in UTC": (
        lambda: am(webhook().replace("2026-03-01T11:58:30Z", "0001-01-01T00:00:00+01:00")),
        400,
        "not an Alertmanager v4 webhook",
    ),
    "negative truncatedAlerts": (
        lambda: am(webhook(truncatedAlerts=-1)),
        400,
        "not an Alertmanager v4 webhook",
    ),
}


@pytest.mark.parametrize("attack", AM_ATTACKS, ids=list(AM_ATTACKS))
def test_alertmanager_refuses(door, attack):
    build, status, reason = AM_ATTACKS[attack]
    head, chunks = build()
    answer = raw_request(door.port, head, chunks)
    assert (answer.status, reason in answer.body) == (status, True), answer.body


def test_alertmanager_cuts_off_an_endless_chunked_body_at_the_cap(door):
    answer = raw_request(door.port, am_head(None), endless(), chunked=True)
    assert answer.status == 413
    assert CAP < door.app.read[-1] <= CAP + 512 * 1024 and answer.sent < 100 * MB  # as above


def test_alertmanager_unauthenticated_100_mb_is_refused_without_reading(door):
    answer = raw_request(door.port, am_head(None, auth=None), endless(), chunked=True)
    assert answer.status == 401 and door.app.read[-1] == 0


@pytest.mark.parametrize("length", ["abc", "-1", "1e9"])
def test_a_content_length_that_is_not_a_number_is_a_4xx(door, length):
    head = am_head(0).replace("Content-Length: 0", f"Content-Length: {length}")
    answer = raw_request(door.port, head, [b"{}"])
    assert 400 <= answer.status < 500


def test_a_good_webhook_still_goes_through(doors, no_server_errors):
    doors.events.clear()
    head, chunks = am(webhook())
    assert raw_request(doors.port, head, chunks).status == 200
    assert [e.event for e in doors.events][:1] == ["lifeboat.alert.firing"]


def test_times_without_a_time_zone_are_read_as_utc_not_a_500(doors, no_server_errors):
    doors.events.clear()
    body = webhook().replace("2026-03-01T11:58:30Z", "2026-03-01T11:58:30")
    body = body.replace(
        '"fingerprint": "a1b2c3d4e5f60718"', '"endsAt": "2026-03-01T13:00:00", "fingerprint": "77"'
    )
    head, chunks = am(body)
    assert raw_request(doors.port, head, chunks).status == 200
    reading = doors.events[0].payload["reading"]
    assert reading["evidence"]["since"] == "2026-03-01T11:58:30Z"


def test_the_reason_is_one_line_and_never_a_traceback(door):
    head, chunks = signed(b"payload=" + deep(20_000).encode())
    answer = raw_request(door.port, head, chunks)
    assert answer.status == 400 and "\n" not in answer.body.strip() and "Traceback" not in answer.body
