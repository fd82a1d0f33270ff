"""Proof that a person decided: a decision signed by the front door that verified who they are.

Prefect resumes a paused run with whatever `run_input` the caller sends, and an open-source
Prefect server does not say who sent it (its `PREFECT_SERVER_API_AUTH_STRING` is one shared
password; no identity reaches the run). So the flow trusts no field of a resume on its own:
only the two front doors that *verified* a person sign what they decided —

- `/slack/actions` after Slack's request signature (the approver is the Slack user id);
- the identity proxy's resume route in `lifeboat serve` after the proxy (SSO, basic auth)
  authenticated the login it passes on (the approver is that login);

with Ed25519 over the question (`Ask`: run id, runbook, action, and the site epoch it was
asked at) and the answer (verdict, reason, approver, via, time, and for a fleet's gate the
jobs a per-job answer approves). The private key lives only
with `lifeboat serve`; the flow verifies with public keys (`lifeboat_dr.core.approval_keys`),
so neither a worker nor anyone holding Prefect's API can sign. A bare REST resume, a decision
signed for another run, runbook, action or epoch, an altered or an old one is `Unverified`,
refused and recorded; whether the verified approver may decide is the runbook's allow-list
(`lifeboat_dr.core.approval`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from lifeboat_dr.core.approval_keys import key_id
from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via

SIGNING_VIAS = (Via.slack, Via.ui, Via.cli)  # channels a front door signs for
ACTIONS = ("failover", "failback", "serving", "recovery")  # what a gate can ask a person to approve
MAX_AGE = timedelta(minutes=10)  # a signed decision is used at once; older ones are replays
CLOCK_SKEW = timedelta(minutes=1)
ASK_KEY = "lifeboat-ask"  # the flow run input where a gate publishes its `Ask` for the front doors
DECIDERS_KEY = "lifeboat-deciders"  # and who may decide (`ApprovalProcess.deciders`), for the screen
MAX_REASON = 2000
MAX_APPROVER = 256
MAX_JOBS = 1000  # a fleet's ask names at most this many jobs


class Unverified(PreconditionFailed):
    """A resume whose decision no front door signed for this question (forged, replayed, stale)."""


@dataclass(frozen=True)
class Ask:
    """What a gate asks a person, and what their signed answer is bound to."""

    run_id: str
    runbook: str
    action: str  # failover | failback | serving | recovery (a rung of the ladder)
    epoch: int | None  # the site epoch when asked; None where the action has none (serving)
    jobs: tuple[str, ...] | None = None  # a fleet's gate: the placed jobs an answer may approve one by one

    @classmethod
    def from_dict(cls, d: object) -> Ask:
        """An ask as the flow publishes it (`lifeboat-ask`); `PreconditionFailed` if malformed."""
        if not isinstance(d, dict):
            raise PreconditionFailed("the run's ask is not an object")
        run_id, runbook, action, epoch = d.get("run_id"), d.get("runbook"), d.get("action"), d.get("epoch")
        if not (isinstance(run_id, str) and isinstance(runbook, str) and action in ACTIONS):
            raise PreconditionFailed("the run's ask names no run, runbook or known action")
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise PreconditionFailed("the run's ask has an epoch that is not a number")
        jobs = d.get("jobs")
        if jobs is not None and not _names(jobs):
            raise PreconditionFailed("the run's ask lists jobs that are not names")
        return cls(run_id[:64], runbook[:200], action, epoch, tuple(jobs) if jobs is not None else None)

    def to_dict(self) -> dict:
        """As published; `jobs` only for a fleet's ask (a runbook's ask reads as it always did)."""
        d = asdict(self)
        if self.jobs is None:
            del d["jobs"]
        else:
            d["jobs"] = list(self.jobs)
        return d


def _names(jobs: object) -> bool:
    return (
        isinstance(jobs, list | tuple)
        and len(jobs) <= MAX_JOBS
        and all(isinstance(j, str) and 0 < len(j) <= 200 for j in jobs)
    )


def published_ask(published: object, run_id: str) -> Ask:
    """The ask a run's gate published (None: it asks nothing: no such run, or not a Lifeboat
    gate), checked to be this run's; `PreconditionFailed` otherwise."""
    if published is None:
        raise PreconditionFailed(f"run {run_id} is not waiting at a Lifeboat approval gate (it asks nothing)")
    ask = Ask.from_dict(published)
    if ask.run_id != run_id:
        raise PreconditionFailed(f"run {run_id} publishes the ask of another run")
    return ask


def _message(
    ask: Ask, approved: bool, reason: str, approver: str, via: str, signed_at: str, jobs: list[str] | None
) -> bytes:
    per_job = {} if jobs is None else {"jobs": sorted(jobs)}  # a whole answer signs as it always did
    return json.dumps(
        {
            **per_job,
            "v": 1,
            "run": str(ask.run_id),
            "runbook": ask.runbook,
            "action": ask.action,
            "epoch": ask.epoch,
            "approved": bool(approved),
            "reason": reason,
            "approver": approver,
            "via": str(via),
            "at": signed_at,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode()


def sign_decision(key: Ed25519PrivateKey, ask: Ask, decision: ApprovalDecision, at: datetime) -> dict:
    """The `run_input` that answers `ask` with `decision`, signed by a front door (its
    `jobs`, a per-job answer to a fleet, signed with it)."""
    signed_at = at.astimezone(UTC).isoformat(timespec="seconds")
    reason, approver = decision.reason[:MAX_REASON], decision.approver[:MAX_APPROVER]
    jobs = None if decision.jobs is None else list(decision.jobs)
    message = _message(ask, decision.approved, reason, approver, decision.via, signed_at, jobs)
    per_job = {} if jobs is None else {"jobs": jobs}
    return {
        **per_job,
        "approved": decision.approved,
        "reason": reason,
        "approver": approver,
        "via": str(decision.via),
        "signed_at": signed_at,
        "runbook": ask.runbook,
        "action": ask.action,
        "epoch": ask.epoch,
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(message)).decode(),
    }


def verdict_key(run_input: dict) -> str | None:
    """Where the flow publishes whether it accepted this signed decision (a flow run input
    key), so `lifeboat approve` can wait for it; None for an unsigned resume."""
    signature = run_input.get("signature")
    if not isinstance(signature, str) or not signature:
        return None
    return "lifeboat-verdict-" + hashlib.sha256(signature.encode()).hexdigest()[:24]


def verify_signed(
    keys: Sequence[Ed25519PublicKey], ask: Ask, run_input: dict, now: datetime
) -> ApprovalDecision:
    """The decision in `run_input` if a front door signed it for `ask` within `MAX_AGE`;
    else `Unverified` saying why. Never trusts a field of the input without the signature.
    A per-job answer (`jobs`) counts only at a fleet's gate and only naming its placed jobs."""
    if not keys:
        raise Unverified(
            "this worker has no approval public key (LIFEBOAT_APPROVAL_PUBLIC_KEYS), so no decision can be verified"
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
        raise Unverified(f"via {str(via)[:20]!r} is not a channel a front door signs for")
    jobs = run_input.get("jobs")
    if jobs is not None and not _names(jobs):
        raise Unverified("a signed decision whose jobs are not a list of names")
    for field, mine in (("runbook", ask.runbook), ("action", ask.action), ("epoch", ask.epoch)):
        if field in run_input and run_input[field] != mine:
            raise Unverified(
                f"signed for {field} {str(run_input[field])[:80]!r}, but this gate asks {field} {mine!r}"
            )
    try:
        raw = base64.b64decode(signature, validate=True)
    except ValueError:
        raw = b""
    message = _message(ask, approved, reason, approver, via, signed_at, None if jobs is None else list(jobs))
    if not any(_valid(k, raw, message) for k in keys):
        raise Unverified(
            f"bad signature (forged, altered, or signed for another run) claiming {approver[:80]} via {via}"
        )
    try:
        at = datetime.fromisoformat(signed_at)
    except ValueError:
        raise Unverified(f"signed_at {signed_at[:40]!r} is not a time") from None
    if at.tzinfo is None or not (now - MAX_AGE <= at <= now + CLOCK_SKEW):
        raise Unverified(f"signed at {signed_at}, outside {MAX_AGE} of now: a replay")
    if jobs is not None:
        if ask.jobs is None:
            raise Unverified(f"a per-job decision, but this gate asks about {ask.runbook} as a whole")
        if stray := sorted(set(jobs) - set(ask.jobs)):
            raise Unverified(f"names job(s) not in the plan: {', '.join(stray)[:200]}")
    return ApprovalDecision(
        approved=approved,
        reason=reason,
        approver=approver,
        via=Via(via),
        jobs=None if jobs is None else list(jobs),
    )


def _valid(key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        key.verify(signature, message)
        return True
    except InvalidSignature:
        return False
