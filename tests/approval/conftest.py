from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifeboat_dr.runbooks.model import Runbook

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


LOGINS = {"U0ALICE": ["alice@example.com"], "U0BOB": ["bob"]}  # what the identity proxy reports


def make_runbook(tmp_path, **approval) -> Runbook:
    return Runbook.model_validate(
        {
            "name": "llama-pretrain",
            "workload": "pretraining",
            "primary": {"infra": "local", "store": f"file://{tmp_path}/primary"},
            "secondary": {
                "infra": "local",
                "store": f"file://{tmp_path}/secondary",
                "candidates": [{"infra": "local"}],
            },
            "job": {"command": "python train.py"},
            "checkpoint": {"cadence": "10m"},
            "approval": {
                "required": True,
                "approvers": ["U0ALICE", "U0BOB"],
                "channel": "C0INCIDENT",
                "timeout": "15m",
                **({} if "approvers" in approval else {"logins": LOGINS}),
                **approval,
            },
        }
    )


@pytest.fixture
def runbook(tmp_path):
    return make_runbook(tmp_path)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


@pytest.fixture
def slack_stub():
    from .slack_stub import SlackStub

    with SlackStub() as stub:
        yield stub


def make_card(run_id: str = "8d4c1a52-0000-4000-8000-000000000001", **kw):
    from lifeboat_dr.providers.chat.base import ApprovalCard

    fields = dict(
        runbook="llama-pretrain",
        run_id=run_id,
        channel="C0INCIDENT",
        evidence=["gpu_health: 6/8 GPUs XID 79", "training_progress: no step for 11m"],
        checkpoint="gs://ckpt-dr/llama/step-120000",
        rpo=timedelta(minutes=12),
        rpo_target=timedelta(minutes=30),
        plan="gcp/us-central1 a3-highgpu-8g 8x H100",
        cost_per_hour=88.49,
        prestage=["image nvcr.io/nvidia/pytorch:24.05-py3: ready", "weights: 3/3 copied"],
        expected_rto=timedelta(minutes=14),
        rto_target=timedelta(minutes=30),
        approvers=["U0ALICE", "U0BOB"],
    )
    return ApprovalCard(**(fields | kw))


SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@dataclass(frozen=True)
class Keys:
    """The approval keys of a deployment: the private one (lifeboat serve's file) and the
    public text the workers hold."""

    signing: object  # Ed25519PrivateKey
    file: Path
    public: str


@pytest.fixture(scope="session")
def approval_keys(tmp_path_factory) -> Keys:
    from lifeboat_dr.core.approval_keys import generate, load_signing_key, public_text

    path = tmp_path_factory.mktemp("keys") / "approval-signing.pem"
    public = public_text(generate(path))
    return Keys(load_signing_key(path), path, public)


@pytest.fixture(autouse=True)
def worker_keys(monkeypatch, approval_keys):
    """The worker's part: only the public key (flows verify decisions with it)."""
    monkeypatch.setenv("LIFEBOAT_APPROVAL_PUBLIC_KEYS", approval_keys.public)
    monkeypatch.delenv("LIFEBOAT_APPROVAL_KEY", raising=False)
    return approval_keys


def signed_click(body_payload: dict, *, secret: str = SIGNING_SECRET, timestamp: int | None = None):
    """Headers and body for a Slack interactivity request, signed like Slack signs it."""
    import json
    import time
    from urllib.parse import urlencode

    from slack_sdk.signature import SignatureVerifier

    body = urlencode({"payload": json.dumps(body_payload)})
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    headers = {
        "x-slack-request-timestamp": ts,
        "x-slack-signature": sig,
        "content-type": "application/x-www-form-urlencoded",
    }
    return headers, body


def click_payload(
    card_blocks: list,
    *,
    run_id: str,
    user: str = "U0ALICE",
    channel: str = "C0INCIDENT",
    approve: bool = True,
    ts: str = "1001.000100",
) -> dict:
    from lifeboat_dr.providers.chat.base import APPROVE_ACTION, REJECT_ACTION

    action = next(
        e
        for b in card_blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == (APPROVE_ACTION if approve else REJECT_ACTION)
    )
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel, "message_ts": ts},
        "message": {"ts": ts, "blocks": card_blocks},
        "actions": [
            {"action_id": action["action_id"], "block_id": "lifeboat_decision", "value": action["value"]}
        ],
    }


def in_thread(fn, *args, **kw):
    """Run `fn` in a thread that sees this test's Prefect settings (context variables)."""
    import contextvars
    import threading

    out: dict = {}
    ctx = contextvars.copy_context()

    def target():
        try:
            out["value"] = ctx.run(fn, *args, **kw)
        except BaseException as e:  # surfaced by the test
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.out = out
    return t


def wait_until(predicate, timeout: float = 60, every: float = 0.2):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {predicate.__doc__ or predicate}")
