"""Slack chat via slack-sdk's WebClient: the Block Kit approval card. See base.py.

slack_sdk is imported inside the class, so a worker that never talks to Slack never
imports it. The bot token is a `SecretStr`, unwrapped only to build the client.
The card's buttons carry `{"run_id", "runbook"}`; `slack_actions.py` receives the clicks.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from lifeboat.errors import ConfigError, ProviderUnavailable
from providers.chat.base import APPROVE_ACTION, REJECT_ACTION, ApprovalCard, CardRef

ACTIONS_BLOCK = "lifeboat_decision"
_RETRYABLE = {"ratelimited", "service_unavailable", "internal_error", "fatal_error", "request_timeout"}


class SlackConfig(BaseModel):
    """How to reach Slack. Secrets come from the environment or a Prefect Secret block."""

    bot_token: SecretStr = Field(description="Bot token (xoxb-…) with chat:write.")
    base_url: str | None = Field(None, description="Web API base URL; only tests change it.")

    def build(self) -> SlackChat:
        return SlackChat(self.bot_token, base_url=self.base_url)


def card_blocks(card: ApprovalCard) -> list[dict[str, Any]]:
    """The card as Block Kit: facts, then Approve/Reject buttons."""
    value = json.dumps({"run_id": card.run_id, "runbook": card.runbook})
    facts = card.facts()
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": f"{'DRILL — ' if card.drill else ''}Failover approval: {card.runbook}"[:150],
            },
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"*Outage evidence*\n{facts[0][1]}"[:3000]},
        },
        {
            "type": "section",
            "fields": [{"type": "mrkdwn", "text": f"*{label}*\n{text}"[:2000]} for label, text in facts[1:]],
        },
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": (
                        f"Run `{card.run_id}`"
                        + (f" · <{card.run_url}|open in Prefect>" if card.run_url else "")
                        + (
                            " · approvers: " + ", ".join(f"<@{a}>" for a in card.approvers)
                            if card.approvers
                            else ""
                        )
                    ),
                }
            ],
        },
        {
            "type": "actions",
            "block_id": ACTIONS_BLOCK,
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve failover"},
                    "value": value,
                },
                {
                    "type": "button",
                    "action_id": REJECT_ACTION,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Reject"},
                    "value": value,
                    "confirm": {
                        "title": {"type": "plain_text", "text": "Reject the failover?"},
                        "text": {"type": "plain_text", "text": "The job stays down until someone acts."},
                        "confirm": {"type": "plain_text", "text": "Reject"},
                        "deny": {"type": "plain_text", "text": "Back"},
                    },
                },
            ],
        },
    ]
    return blocks


def decided_blocks(blocks: list[dict[str, Any]], outcome: str) -> list[dict[str, Any]]:
    """The card's blocks with the buttons replaced by the outcome line."""
    kept = [b for b in blocks if b.get("block_id") != ACTIONS_BLOCK and b.get("type") != "actions"]
    return [*kept, {"type": "section", "text": {"type": "mrkdwn", "text": f"*{outcome}*"[:3000]}}]


def fallback_text(card: ApprovalCard) -> str:
    return f"Failover approval needed for {card.runbook} (run {card.run_id})"


class SlackChat:
    def __init__(self, bot_token: SecretStr | str, *, base_url: str | None = None, client=None):
        if client is None:
            try:
                from slack_sdk import WebClient
                from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
            except ImportError as e:  # pragma: no cover - slack-sdk is a core dependency
                raise ConfigError("Slack needs slack-sdk: pip install 'slack-sdk>=3.30'") from e
            token = bot_token.get_secret_value() if isinstance(bot_token, SecretStr) else bot_token
            kw = {"base_url": base_url} if base_url else {}
            client = WebClient(token=token, timeout=10, **kw)
            client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
        self.client = client

    def _call(self, method: str, **kw) -> dict[str, Any]:
        from slack_sdk.errors import SlackApiError

        try:
            return getattr(self.client, method)(**kw).data
        except SlackApiError as e:
            error = e.response.get("error", "") if e.response is not None else ""
            status = getattr(e.response, "status_code", 0) or 0
            if error in _RETRYABLE or status >= 500 or status == 429:
                raise ProviderUnavailable(f"Slack {method}: {error or status}") from None
            raise ConfigError(f"Slack {method}: {error or status}") from None
        except OSError as e:  # connection refused, timeout, DNS
            raise ProviderUnavailable(f"Slack {method}: {e}") from None

    def post_card(self, card: ApprovalCard) -> CardRef:
        if not card.channel:
            raise ConfigError(
                f"runbook {card.runbook}: approval.channel is not set; Slack needs a channel ID"
            )
        data = self._call(
            "chat_postMessage", channel=card.channel, text=fallback_text(card), blocks=card_blocks(card)
        )
        return CardRef(data["channel"], data["ts"])

    def update_card(self, ref: CardRef, card: ApprovalCard, outcome: str) -> None:
        self.update_blocks(ref, decided_blocks(card_blocks(card), outcome), text=outcome)

    def update_blocks(self, ref: CardRef, blocks: list[dict[str, Any]], text: str) -> None:
        self._call("chat_update", channel=ref.channel, ts=ref.ts, text=text, blocks=blocks)

    def post(self, channel: str, text: str, thread: CardRef | None = None) -> None:
        kw = {"thread_ts": thread.ts} if thread else {}
        self._call("chat_postMessage", channel=channel, text=text, **kw)

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        self._call("chat_postEphemeral", channel=channel, user=user, text=text)

    def answer(self, card: ApprovalCard):
        return None  # people answer with the buttons
