"""Slack chat via slack-sdk's WebClient: the Block Kit approval card. See base.py.

slack_sdk is imported inside the class, so a worker that never talks to Slack never
imports it. The bot token is a `SecretStr`, unwrapped only to build the client.
The card's buttons carry `{"run_id", "runbook"}`; `slack_actions.py` receives the clicks.
Text that Lifeboat did not write (alert summaries, reasons, URIs) is escaped for mrkdwn and
marked verbatim; Approve asks for confirmation, stating the plan's $/h.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.chat.base import APPROVE_ACTION, REJECT_ACTION, ApprovalCard, CardRef

ACTIONS_BLOCK = "lifeboat_decision"
_RETRYABLE = {"ratelimited", "service_unavailable", "internal_error", "fatal_error", "request_timeout"}


class SlackConfig(BaseModel):
    """How to reach Slack. Secrets come from the environment or a Prefect Secret block."""

    bot_token: SecretStr = Field(description="Bot token (xoxb-…) with chat:write.")
    base_url: str | None = Field(None, description="Web API base URL; only tests change it.")

    def build(self) -> SlackChat:
        return SlackChat(self.bot_token, base_url=self.base_url)


def escape(text: str) -> str:
    """Slack mrkdwn's three control characters, escaped: alert text can then neither link
    (`<http://evil|Approve>`) nor mention (`<!channel>`, `<@U…>`). Our own links and
    mentions are written around escaped parts."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn(text: str, limit: int, *, verbatim: bool = True) -> dict[str, Any]:
    """A mrkdwn text object within Slack's `limit`, never cutting an escape in half.
    `verbatim`: Slack does not auto-link bare URLs or #channel names in it."""
    if len(text) > limit:
        text = _ENTITY_TAIL.sub("", text[: limit - 1]) + "…"
    obj: dict[str, Any] = {"type": "mrkdwn", "text": text}
    if verbatim:
        obj["verbatim"] = True
    return obj


_ENTITY_TAIL = re.compile(r"&[a-z]{0,3}$")


def _price(card: ApprovalCard) -> str:
    return f"${card.cost_per_hour:,.2f}/h" if card.cost_per_hour is not None else "an unknown price per hour"


def approve_confirm(card: ApprovalCard) -> dict[str, Any]:
    """The dialog Slack shows before an Approve click counts: what it starts, at what $/h."""
    plan = card.plan or "the first candidate that has capacity"
    if card.action == "failback":
        starts = f"Fences {card.runbook}'s secondary and resumes the job on its recovered primary."
    else:
        starts = (
            f"Fences {card.runbook}'s primary and provisions {plan} "
            f"at {_price(card)}, billed until the secondary is torn down."
        )
    text = f"{'DRILL: ' if card.drill else ''}{starts}"
    button = f"Approve ({_price(card)})" if card.cost_per_hour is not None else "Approve"
    return {
        "title": {"type": "plain_text", "text": f"Approve the {card.what}?"},
        "text": {"type": "plain_text", "text": text[:300]},
        "confirm": {"type": "plain_text", "text": button[:30]},
        "deny": {"type": "plain_text", "text": "Back"},
        "style": "primary",
    }


def card_blocks(card: ApprovalCard) -> list[dict[str, Any]]:
    """The card as Block Kit: facts (escaped), then Approve (with a $/h confirm) / Reject."""
    value = json.dumps({"run_id": card.run_id, "runbook": card.runbook})
    facts = card.facts()
    context = f"Run `{escape(card.run_id)}`"
    if card.run_url:
        context += f" · <{escape(card.run_url).replace('|', '%7C')}|open in Prefect>"
    if card.approvers:
        context += " · approvers: " + ", ".join(f"<@{escape(a)}>" for a in card.approvers)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": f"{'DRILL — ' if card.drill else ''}{card.what.capitalize()} approval: {card.runbook}"[
                    :150
                ],
            },
        },
        {"type": "section", "text": _mrkdwn(f"*Outage evidence*\n{escape(facts[0][1])}", 3000)},
        *(  # Block Kit takes at most 10 fields a section
            {
                "type": "section",
                "fields": [_mrkdwn(f"*{label}*\n{escape(text)}", 2000) for label, text in facts[i : i + 10]],
            }
            for i in range(1, len(facts), 10)
        ),
        {"type": "context", "elements": [_mrkdwn(context, 3000, verbatim=False)]},
        {
            "type": "actions",
            "block_id": ACTIONS_BLOCK,
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": f"Approve {card.what}"},
                    "value": value,
                    "confirm": approve_confirm(card),
                },
                {
                    "type": "button",
                    "action_id": REJECT_ACTION,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Reject"},
                    "value": value,
                    "confirm": {
                        "title": {"type": "plain_text", "text": f"Reject the {card.what}?"},
                        "text": {"type": "plain_text", "text": _rejected(card)},
                        "confirm": {"type": "plain_text", "text": "Reject"},
                        "deny": {"type": "plain_text", "text": "Back"},
                    },
                },
            ],
        },
    ]
    return blocks


def decided_blocks(blocks: list[dict[str, Any]], outcome: str) -> list[dict[str, Any]]:
    """The card's blocks with the buttons replaced by the outcome line (its reason escaped)."""
    kept = [b for b in blocks if b.get("block_id") != ACTIONS_BLOCK and b.get("type") != "actions"]
    return [*kept, {"type": "section", "text": _mrkdwn(f"*{escape(outcome)}*", 3000)}]


def fallback_text(card: ApprovalCard) -> str:
    drill = "DRILL: " if card.drill else ""
    return f"{drill}{card.what.capitalize()} approval needed for {card.runbook} (run {card.run_id})"


def _rejected(card: ApprovalCard) -> str:
    """What a rejection leaves: a failback's job keeps running on the secondary."""
    if card.action == "failback":
        return "The job keeps running on the secondary."
    return "The job stays down until someone acts."


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
        """Replace the card; `text` (the outcome, a person's reason in it) is escaped."""
        self._call("chat_update", channel=ref.channel, ts=ref.ts, text=escape(text), blocks=blocks)

    def post(self, channel: str, text: str, thread: CardRef | None = None) -> None:
        kw = {"thread_ts": thread.ts} if thread else {}
        self._call("chat_postMessage", channel=channel, text=text, **kw)

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        self._call("chat_postEphemeral", channel=channel, user=user, text=text)

    def answer(self, card: ApprovalCard):
        return None  # people answer with the buttons
