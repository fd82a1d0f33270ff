"""Proof that a person decided: a decision signed by the front door that verified who they are.

Prefect resumes a paused run with whatever `run_input` the caller sends, and an open-source
Prefect server does not say who sent it (its `PREFECT_SERVER_API_AUTH_STRING` is one shared
password; no identity reaches the run). So the flow trusts no field of a resume on its own:
only the two front doors that *verified* a person sign what they decided —

- `/slack/actions` after Slack's request signature (the approver is the Slack user id);
- the identity proxy's resume route in `lifeboat serve` after the proxy (SSO, basic auth)
  authenticated the login it passes on (the approver is that login);

with an HMAC-SHA256 over (run id, decision, reason, approver, via, time) under a key the
flow also holds (`LIFEBOAT_APPROVAL_KEY` or the Prefect Secret block `lifeboat-approval-key`).
The flow verifies it (`verify_signed`): a bare REST resume, a copy of another run's decision
or an old one is `Unverified`, refused and recorded; whether the verified approver may decide
is the runbook's allow-list (`lifeboat_dr.core.approval`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via

SIGNING_VIAS = (Via.slack, Via.ui, Via.cli)  # channels a front door signs for
MAX_AGE = timedelta(minutes=10)  # a signed decision is used at once; older ones are replays
CLOCK_SKEW = timedelta(minutes=1)


class Unverified(PreconditionFailed):
    """A resume whose decision no front door signed for this run (forged, replayed, stale)."""


def _message(run_id: str, approved: bool, reason: str, approver: str, via: str, signed_at: str) -> bytes:
    return json.dumps(
        [str(run_id), bool(approved), reason, approver, str(via), signed_at],
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode()


def sign_decision(key: bytes, run_id: str, decision: ApprovalDecision, at: datetime) -> dict:
    """The `run_input` that resumes `run_id` with `decision`, signed by a front door."""
    if not key:
        raise PreconditionFailed("no approval signing key: set LIFEBOAT_APPROVAL_KEY")
    signed_at = at.astimezone(UTC).isoformat(timespec="seconds")
    mac = hmac.new(
        key,
        _message(run_id, decision.approved, decision.reason, decision.approver, decision.via, signed_at),
        hashlib.sha256,
    )
    return {
        "approved": decision.approved,
        "reason": decision.reason,
        "approver": decision.approver,
        "via": str(decision.via),
        "signed_at": signed_at,
        "signature": mac.hexdigest(),
    }


def verify_signed(key: bytes | None, run_id: str, run_input: dict, now: datetime) -> ApprovalDecision:
    """The decision in `run_input` if a front door signed it for `run_id` within `MAX_AGE`;
    else `Unverified` saying why. Never trusts `approver` or `via` without the signature."""
    if not key:
        raise Unverified(
            "this worker has no approval signing key (LIFEBOAT_APPROVAL_KEY), so no decision can be verified"
        )
    signature, signed_at = run_input.get("signature"), run_input.get("signed_at")
    if not isinstance(signature, str) or not isinstance(signed_at, str):
        raise Unverified("not signed by Slack or the identity proxy (a bare resume of the run)")
    approver, via, reason = run_input.get("approver"), run_input.get("via"), run_input.get("reason")
    approved = run_input.get("approved")
    if not (
        isinstance(approver, str) and approver and isinstance(reason, str) and isinstance(approved, bool)
    ):
        raise Unverified("a signed decision without approver, reason or verdict")
    if via not in {str(v) for v in SIGNING_VIAS}:
        raise Unverified(f"via {via!r} is not a channel a front door signs for")
    expected = hmac.new(key, _message(run_id, approved, reason, approver, via, signed_at), hashlib.sha256)
    if not hmac.compare_digest(expected.hexdigest(), signature):
        raise Unverified(
            f"bad signature (forged, altered, or signed for another run) claiming {approver} via {via}"
        )
    try:
        at = datetime.fromisoformat(signed_at)
    except ValueError:
        raise Unverified(f"signed_at {signed_at[:40]!r} is not a time") from None
    if at.tzinfo is None or not (now - MAX_AGE <= at <= now + CLOCK_SKEW):
        raise Unverified(f"signed at {signed_at}, outside {MAX_AGE} of now: a replay")
    return ApprovalDecision(approved=approved, reason=reason, approver=approver, via=Via(via))
