"""`POST /slack/actions`: Slack interactivity for the approval card, served by `lifeboat serve`.

Order of checks, each refusal changing nothing: the signing headers (401), the size cap
before reading the body (413, `max_body_bytes`, chunked bodies cut off as they stream), the
request signature over the raw bytes and its 5-minute window (401), the body's encoding and
shape (400; see slack_request.py), then our own action ids, then the channel, then the
approver allow-list, then one decision per run. The endpoint answers at once (Slack wants
an ack within 3 s) and resumes the paused Prefect run in a background task with an
`ApprovalDecision` signed (Ed25519, the private key only here) for what that run's gate asks
(`lifeboat_dr.core.approval_proof`: the flow accepts no Slack decision it did not get from
here), then replaces the buttons with who decided and when. A second click,
a Slack retry or a click after the run stopped waiting changes nothing; people who may
not decide get an ephemeral refusal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, SecretStr
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lifeboat_dr.core.approval_proof import ASK_KEY, published_ask, sign_decision
from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed
from lifeboat_dr.providers.chat.base import (
    APPROVE_ACTION,
    REJECT_ACTION,
    ApprovalDecision,
    CardRef,
    Via,
    outcome_text,
)
from lifeboat_dr.providers.chat.slack import SlackChat, decided_blocks
from lifeboat_dr.shell.inbound import BadRequest
from lifeboat_dr.shell.server import read_body
from lifeboat_dr.shell.slack_request import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Click,
    check_headers,
    parse_click,
    verify,
)

log = logging.getLogger("lifeboat.slack")

Resume = Callable[[str, dict[str, Any]], None]


class SlackSettings(BaseModel):
    """What `/slack/actions` needs. Build from the protected runbooks with `from_runbooks`."""

    signing_secret: SecretStr = Field(description="Slack app signing secret (never logged).")
    bot_token: SecretStr = Field(description="Bot token (xoxb-…) to update cards and send refusals.")
    base_url: str | None = Field(None, description="Slack Web API base URL; only tests change it.")
    approvers: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Runbook name -> Slack user IDs allowed to decide (escalation included).",
    )
    channels: dict[str, str] = Field(
        default_factory=dict, description="Runbook name -> the channel its card is posted in."
    )
    max_body_bytes: int = Field(
        256 * 1024, gt=0, description="Larger requests are refused with 413 before they are read."
    )

    @classmethod
    def from_runbooks(cls, runbooks, **kw) -> SlackSettings:
        approvers, channels = {}, {}
        for rb in runbooks:
            a = rb.approval
            approvers[rb.name] = [*a.approvers, *(a.escalation.approvers if a.escalation else [])]
            if a.channel:
                channels[rb.name] = a.channel
        return cls(approvers=approvers, channels=channels, **kw)


def _prefect_resume(run_id: str, run_input: dict[str, Any]) -> None:
    from lifeboat_dr.providers.orchestrator.prefect_api import resume_run

    resume_run(run_id, run_input)


def _prefect_ask(run_id: str) -> Any:
    from lifeboat_dr.providers.orchestrator.prefect_api import read_run_input

    return read_run_input(run_id, ASK_KEY)


class SlackActions:
    """The endpoint's state: decided runs, by run id (idempotency within this process;
    across restarts Prefect itself refuses to resume a run that is no longer paused)."""

    def __init__(
        self,
        settings: SlackSettings,
        *,
        signing_key=None,
        resume: Resume | None = None,
        ask: Callable[[str], Any] | None = None,
        chat: SlackChat | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        if signing_key is None:
            raise ConfigError(
                "Slack actions need LIFEBOAT_APPROVAL_SIGNING_KEY_FILE (the key that signs what "
                "Slack verified; the flows hold its public key)"
            )
        self.settings = settings
        self.key = signing_key
        self.resume = resume or _prefect_resume
        self.ask = ask or _prefect_ask
        self.chat = chat or SlackChat(settings.bot_token, base_url=settings.base_url)
        self.clock = clock
        self._lock = threading.Lock()
        self.decided: dict[str, str] = {}  # run id -> outcome line

    async def handle(self, request: Request) -> Response:
        try:
            click = await self._click(request)
        except BadRequest as e:
            if e.status == 401:
                log.warning("refused a Slack request with a bad signature or headers: %s", e.reason)
            return Response(e.reason, status_code=e.status)
        if click is None:  # someone else's button
            return Response(status_code=200)
        refuse = self._refusal(
            click.runbook,
            click.channel,
            click.user,
            retry=bool(request.headers.get("x-slack-retry-num")),
            run_id=click.run_id,
        )
        if refuse is not None:
            task = BackgroundTask(self.chat.ephemeral, click.channel, click.user, refuse) if refuse else None
            return Response(status_code=200, background=task)
        approved = click.action_id == APPROVE_ACTION
        decision = ApprovalDecision(
            approved=approved,
            reason=f"{'approved' if approved else 'rejected'} in Slack",
            approver=click.user,
            via=Via.slack,
        )
        ref = CardRef(click.channel, click.message_ts)
        return Response(
            status_code=200,
            background=BackgroundTask(self._decide, click.run_id, click.runbook, decision, ref, click.blocks),
        )

    async def _click(self, request: Request) -> Click | None:
        """Headers (401), size (413, before reading), signature (401), shape (400)."""
        timestamp, sent = request.headers.get(TIMESTAMP_HEADER), request.headers.get(SIGNATURE_HEADER)
        check_headers(timestamp, sent)
        limit = self.settings.max_body_bytes
        body = await read_body(request, limit)
        verify(
            self.settings.signing_secret.get_secret_value(), timestamp, sent, body, self.clock().timestamp()
        )
        return parse_click(body, (APPROVE_ACTION, REJECT_ACTION))

    def _refusal(self, runbook: str, channel: str, user: str, *, retry: bool, run_id: str) -> str | None:
        """None to go ahead; "" to drop silently (a Slack retry); else the ephemeral refusal."""
        expected = self.settings.channels.get(runbook)
        if runbook not in self.settings.approvers:
            return f"Lifeboat does not protect a job named {runbook!r} here."
        if expected and channel != expected:
            return f"Approvals for {runbook} are taken in <#{expected}> only."
        if user not in self.settings.approvers[runbook]:
            return f"You are not on the approver list for {runbook}; nothing was changed."
        with self._lock:
            if run_id in self.decided:
                return "" if retry else f"Already decided: {self.decided[run_id]}"
            self.decided[run_id] = "in progress"
        return None

    def _decide(
        self, run_id: str, runbook: str, decision: ApprovalDecision, ref: CardRef, blocks: list[dict]
    ) -> None:
        try:  # signed for what this run asks: a bare REST resume cannot claim to be a Slack click
            ask = published_ask(self.ask(run_id), run_id)
            if ask.runbook != runbook:
                raise PreconditionFailed(f"run {run_id} asks about {ask.runbook}, not {runbook}")
            self.resume(run_id, sign_decision(self.key, ask, decision, self.clock()))
        except Exception as e:  # the run is no longer paused, or Prefect is down
            log.warning("could not resume run %s: %s", run_id, e)
            gone = isinstance(e, (PreconditionFailed, NotFound))  # mapped by the Prefect adapter
            with self._lock:
                if gone:
                    self.decided[run_id] = "the run is no longer waiting for approval"
                else:
                    self.decided.pop(run_id, None)  # let a person try again
            text = (
                "Nothing changed: this run is no longer waiting for approval (already decided, or finished)."
                if gone
                else f"Nothing changed: could not reach Prefect to resume the run ({e}); try again."
            )
            self.chat.ephemeral(ref.channel, decision.approver, text)
            return
        outcome = outcome_text(decision, self.clock())
        with self._lock:
            self.decided[run_id] = outcome
        self.chat.update_blocks(ref, decided_blocks(blocks, outcome), text=outcome)


def slack_routes(settings: SlackSettings, **kw) -> list[Route]:
    """The routes `lifeboat serve` mounts: `POST /slack/actions` (`kw`: `signing_key`, and
    the Prefect calls tests replace)."""
    actions = SlackActions(settings, **kw)
    return [Route("/slack/actions", actions.handle, methods=["POST"])]
