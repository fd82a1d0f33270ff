"""Signed requests into the real `/slack/actions` endpoint (Starlette TestClient).

The resume callable records what Prefect would receive; the Prefect-server tests in
test_prefect_approval.py drive the same endpoint against a real paused run."""

import json
import time

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.providers.chat.slack import card_blocks
from lifeboat_dr.shell.server import create_app
from lifeboat_dr.shell.slack_actions import SlackSettings, slack_routes

from .conftest import SIGNING_SECRET, click_payload, make_card, make_runbook, signed_click

RUN = "8d4c1a52-0000-4000-8000-000000000001"


def asks(run_id):
    """What the paused run's gate publishes (`lifeboat-ask`), as Prefect would return it."""
    return {"run_id": run_id, "runbook": "llama-pretrain", "action": "failover", "epoch": 3}


@pytest.fixture
def endpoint(slack_stub, tmp_path, approval_keys):
    resumed: list[tuple[str, dict]] = []
    paused = {RUN}
    prefect_down: list[Exception] = []  # errors the next resumes raise, as an unreachable API would

    def resume(run_id, run_input):
        if prefect_down:
            raise prefect_down.pop(0)
        if run_id not in paused:
            raise PreconditionFailed(
                f"run {run_id} is not waiting for approval"
            )  # as the Prefect adapter maps it
        paused.discard(run_id)
        resumed.append((run_id, run_input))

    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path, escalation={"approvers": ["U0DIRECTOR"], "timeout": "5m"})],
        signing_secret=SecretStr(SIGNING_SECRET),
        bot_token=SecretStr("xoxb-test"),
        base_url=slack_stub.base_url,
    )
    client = TestClient(
        create_app(slack_routes(settings, signing_key=approval_keys.signing, resume=resume, ask=asks))
    )
    client.resumed, client.paused, client.prefect_down = resumed, paused, prefect_down
    return client


def _click(client, *, secret=SIGNING_SECRET, timestamp=None, extra_headers=None, **kw):
    headers, body = signed_click(
        click_payload(card_blocks(make_card(run_id=kw.pop("run_id", RUN))), run_id=RUN, **kw),
        secret=secret,
        timestamp=timestamp,
    )
    return client.post("/slack/actions", content=body, headers=headers | (extra_headers or {}))


def test_an_approver_click_resumes_the_run_and_updates_the_card(endpoint, slack_stub):
    r = _click(endpoint, user="U0ALICE")
    assert r.status_code == 200
    ((run_id, run_input),) = endpoint.resumed
    from datetime import UTC, datetime

    from lifeboat_dr.core.approval_keys import public_keys
    from lifeboat_dr.core.approval_proof import Ask, verify_signed

    # signed for what this run asks, with the key only lifeboat serve holds; the flow verifies
    # with the public key: only this endpoint can speak for Slack
    ask = Ask(RUN, "llama-pretrain", "failover", 3)
    decision = verify_signed(public_keys(), ask, run_input, datetime.now(UTC))
    assert run_id == RUN and decision.model_dump(mode="json") == {
        "approved": True,
        "reason": "approved in Slack",
        "approver": "U0ALICE",
        "via": "slack",
    }
    (update,) = slack_stub.called("chat.update")
    assert update["ts"] == "1001.000100" and "Approved by U0ALICE via slack at" in update["text"]
    assert not [b for b in update["blocks"] if b["type"] == "actions"]


def test_without_the_signing_key_the_endpoint_refuses_to_start(tmp_path):
    from lifeboat_dr.kernel.errors import ConfigError

    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path)], signing_secret=SecretStr(SIGNING_SECRET), bot_token=SecretStr("x")
    )
    with pytest.raises(ConfigError, match="LIFEBOAT_APPROVAL_SIGNING_KEY_FILE"):
        slack_routes(settings)


def test_reject_click_resumes_with_a_rejection(endpoint):
    _click(endpoint, user="U0BOB", approve=False)
    assert endpoint.resumed[0][1]["approved"] is False


def test_a_second_click_changes_nothing_and_says_who_decided(endpoint, slack_stub):
    _click(endpoint, user="U0ALICE")
    _click(endpoint, user="U0BOB", approve=False)
    assert len(endpoint.resumed) == 1 and len(slack_stub.called("chat.update")) == 1
    (refusal,) = slack_stub.called("chat.postEphemeral")
    assert refusal["user"] == "U0BOB" and refusal["text"].startswith("Already decided: Approved by U0ALICE")


def test_a_slack_retry_of_the_same_click_is_dropped_silently(endpoint, slack_stub):
    _click(endpoint, user="U0ALICE")
    r = _click(
        endpoint,
        user="U0ALICE",
        extra_headers={"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"},
    )
    assert r.status_code == 200 and len(endpoint.resumed) == 1
    assert slack_stub.called("chat.postEphemeral") == []


def test_an_unknown_user_gets_an_ephemeral_refusal_and_nothing_changes(endpoint, slack_stub):
    _click(endpoint, user="U0MALLORY")
    assert endpoint.resumed == [] and slack_stub.called("chat.update") == []
    (refusal,) = slack_stub.called("chat.postEphemeral")
    assert refusal["user"] == "U0MALLORY" and "not on the approver list" in refusal["text"]


def test_the_escalation_approver_is_on_the_allow_list(endpoint):
    _click(endpoint, user="U0DIRECTOR")
    assert endpoint.resumed[0][1]["approver"] == "U0DIRECTOR"


def test_a_click_from_another_channel_is_refused(endpoint, slack_stub):
    _click(endpoint, user="U0ALICE", channel="C0RANDOM")
    assert endpoint.resumed == [] and "<#C0INCIDENT>" in slack_stub.called("chat.postEphemeral")[0]["text"]


@pytest.mark.parametrize(
    "tamper",
    [
        {"secret": "not-the-signing-secret"},
        {"timestamp": int(time.time()) - 6 * 60},
    ],
    ids=["bad-signature", "six-minute-old-timestamp"],
)
def test_bad_signature_or_old_timestamp_is_refused_and_changes_nothing(endpoint, slack_stub, tamper):
    r = _click(endpoint, user="U0ALICE", **tamper)
    assert r.status_code == 401
    assert endpoint.resumed == [] and slack_stub.calls == []


def test_a_tampered_body_fails_the_signature(endpoint, slack_stub):
    headers, body = signed_click(click_payload(card_blocks(make_card()), run_id=RUN, user="U0MALLORY"))
    forged = body.replace("U0MALLORY", "U0ALICE")
    assert endpoint.post("/slack/actions", content=forged, headers=headers).status_code == 401
    assert endpoint.resumed == []


def test_a_click_after_the_run_stopped_waiting_changes_nothing(endpoint, slack_stub):
    endpoint.paused.clear()
    _click(endpoint, user="U0ALICE")
    assert slack_stub.called("chat.update") == []
    assert (
        "Nothing changed: this run is no longer waiting" in slack_stub.called("chat.postEphemeral")[0]["text"]
    )
    _click(endpoint, user="U0BOB")
    assert "no longer waiting" in slack_stub.called("chat.postEphemeral")[1]["text"]


def test_prefect_unreachable_lets_the_approver_try_again(endpoint, slack_stub):
    endpoint.prefect_down.append(ConnectionError("connection refused"))
    _click(endpoint, user="U0ALICE")
    assert "could not reach Prefect" in slack_stub.called("chat.postEphemeral")[0]["text"]
    assert endpoint.resumed == []
    _click(endpoint, user="U0ALICE")
    assert len(endpoint.resumed) == 1 and len(slack_stub.called("chat.update")) == 1


def test_the_signing_secret_never_reaches_the_logs(endpoint, caplog):
    _click(endpoint, user="U0ALICE", secret="wrong")
    assert SIGNING_SECRET not in caplog.text and "bad signature" in caplog.text
    assert (
        json.dumps(
            SlackSettings(signing_secret=SecretStr(SIGNING_SECRET), bot_token=SecretStr("x")).model_dump(
                mode="json"
            )
        ).count(SIGNING_SECRET)
        == 0
    )


def test_the_click_is_acked_before_the_run_is_resumed_over_real_http(slack_stub, tmp_path, approval_keys):
    """Slack wants the ack within 3 s; resuming (a Prefect API call) happens after it."""
    import asyncio
    import threading
    import urllib.request

    import uvicorn

    resume_may_finish, resumed = threading.Event(), threading.Event()

    def slow_resume(run_id, run_input):
        resume_may_finish.wait(30)
        resumed.set()

    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path)],
        signing_secret=SecretStr(SIGNING_SECRET),
        bot_token=SecretStr("xoxb-test"),
        base_url=slack_stub.base_url,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(
                slack_routes(settings, signing_key=approval_keys.signing, resume=slow_resume, ask=asks)
            ),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            ws="none",
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        headers, body = signed_click(click_payload(card_blocks(make_card(run_id=RUN)), run_id=RUN))
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/slack/actions", data=body.encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        assert not resumed.is_set()  # acked while the resume is still waiting
        resume_may_finish.set()
        assert resumed.wait(10)
    finally:
        resume_may_finish.set()
        server.should_exit = True
        thread.join(10)
