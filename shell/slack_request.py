"""A Slack interactivity request, checked: signature first, then shape. See slack_actions.py.

Slack signs `v0:{X-Slack-Request-Timestamp}:{raw body}` with HMAC-SHA256 under the app's
signing secret and sends `v0=<hex>` as `X-Slack-Signature`
(https://api.slack.com/authentication/verifying-requests-from-slack). The signature is
checked over the raw bytes, so a body that is not UTF-8 is refused as a bad request after
it proved who sent it, never as a crash. The click's payload is then validated field by
field: a signed body of the wrong shape is a 400 naming what is wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from lifeboat_dr.shell.inbound import BadRequest, parse_form, parse_json

TIMESTAMP_HEADER = "x-slack-request-timestamp"
SIGNATURE_HEADER = "x-slack-signature"
MAX_AGE_S = 5 * 60  # Slack's replay window


def check_headers(timestamp: str | None, signature: str | None) -> int:
    """401 unless both signing headers are present and well-formed; the timestamp."""
    if not timestamp or not signature:
        raise BadRequest(401, "missing X-Slack-Request-Timestamp or X-Slack-Signature")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise BadRequest(401, "X-Slack-Request-Timestamp is not a Unix time")
    if not signature.startswith("v0="):
        raise BadRequest(401, "X-Slack-Signature is not a v0 signature")
    return int(timestamp)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 signature of `body` sent at `timestamp`."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify(secret: str, timestamp: str | None, sent: str | None, body: bytes, now: float) -> None:
    """401 unless `sent` is Slack's signature of `body` within the replay window."""
    at = check_headers(timestamp, sent)
    if abs(now - at) > MAX_AGE_S:
        raise BadRequest(401, "request timestamp outside the 5-minute window")
    expected = signature(secret, str(timestamp), body).encode()
    if not hmac.compare_digest(expected, str(sent).encode("utf-8", "replace")):
        raise BadRequest(401, "invalid signature")


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Id(_Shape):
    id: StrictStr = Field(min_length=1, max_length=64)


class _Action(_Shape):
    action_id: StrictStr = Field(max_length=255)
    value: StrictStr = Field("", max_length=2000)


class _Container(_Shape):
    channel_id: StrictStr | None = Field(None, max_length=64)
    message_ts: StrictStr | None = Field(None, max_length=64)


class _Message(_Shape):
    ts: StrictStr | None = Field(None, max_length=64)
    blocks: list[dict[str, Any]] = Field(default_factory=list, max_length=100)


class _Payload(_Shape):
    user: _Id
    actions: list[_Action] = Field(min_length=1)
    channel: _Id | None = None
    container: _Container = Field(default_factory=_Container)
    message: _Message | None = None


class _Value(_Shape):
    run_id: StrictStr = Field(max_length=64)
    runbook: StrictStr = Field(max_length=64)


@dataclass(frozen=True)
class Click:
    """One button click on a Lifeboat card, every field a checked string."""

    action_id: str
    run_id: str  # a UUID: the paused flow run
    runbook: str
    user: str  # Slack user ID of whoever clicked
    channel: str
    message_ts: str
    blocks: list[dict[str, Any]] = field(default_factory=list)  # the card as Slack shows it


def parse_click(body: bytes, actions: tuple[str, ...]) -> Click | None:
    """The click in a signed body; None for an action that is not one of `actions`.
    Raises `BadRequest(400)` naming the first problem."""
    form = parse_form(body)
    if "payload" not in form:
        raise BadRequest(400, "no payload field")
    try:
        payload = _Payload.model_validate(parse_json(form["payload"], "payload"))
    except ValidationError as e:
        raise BadRequest(400, f"not a Slack block action: {_problem(e)}") from None
    action = payload.actions[0]
    if action.action_id not in actions:
        return None
    try:
        value = _Value.model_validate(parse_json(action.value or "{}", "action value"))
        run_id = str(uuid.UUID(value.run_id))
    except ValidationError as e:
        raise BadRequest(400, f"not a Lifeboat action: value.{_problem(e)}") from None
    except ValueError:
        raise BadRequest(400, "not a Lifeboat action: value.run_id: not a flow run id") from None
    channel = (payload.channel.id if payload.channel else None) or payload.container.channel_id
    ts = (payload.message.ts if payload.message else None) or payload.container.message_ts
    if not channel or not ts:
        raise BadRequest(400, "not a Slack block action: no channel or message timestamp")
    blocks = payload.message.blocks if payload.message else []
    return Click(action.action_id, run_id, value.runbook, payload.user.id, channel, ts, blocks)


def _problem(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'payload'}: {err['msg']}"
