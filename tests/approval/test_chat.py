import io
import json

import pytest
from pydantic import SecretStr

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.chat import Chat
from lifeboat_dr.providers.chat.console import ConsoleChat
from lifeboat_dr.providers.chat.slack import SlackChat, SlackConfig, card_blocks

from .conftest import make_card


def test_slack_card_shows_evidence_checkpoint_rpo_plan_cost_prestage_and_rto(slack_stub):
    chat = SlackConfig(bot_token=SecretStr("xoxb-test"), base_url=slack_stub.base_url).build()
    ref = chat.post_card(make_card())
    (posted,) = slack_stub.called("chat.postMessage")
    text = json.dumps(posted["blocks"])
    for fact in (
        "XID 79",
        "gs://ckpt-dr/llama/step-120000",
        "12m (target 30m)",
        "a3-highgpu-8g",
        "$88.49/h",
        "weights: 3/3 copied",
        "Expected RTO",
        "14m (target 30m)",
    ):
        assert fact in text, fact
    actions = [b for b in posted["blocks"] if b["type"] == "actions"][0]["elements"]
    assert [a["action_id"] for a in actions] == ["lifeboat_approve", "lifeboat_reject"]
    assert json.loads(actions[0]["value"])["run_id"] == "8d4c1a52-0000-4000-8000-000000000001"
    assert (ref.channel, ref.ts) == ("C0INCIDENT", "1001.000100")


def test_slack_update_replaces_the_buttons_with_the_outcome(slack_stub):
    chat = SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url)
    ref = chat.post_card(make_card())
    chat.update_card(ref, make_card(), "Approved by U0ALICE via slack at 2026-11-30T08:05:00+00:00: go")
    (update,) = slack_stub.called("chat.update")
    assert update["ts"] == ref.ts and not [b for b in update["blocks"] if b["type"] == "actions"]
    assert "Approved by U0ALICE" in json.dumps(update["blocks"])


def test_slack_rate_limit_is_retried_by_the_client(slack_stub):
    slack_stub.fail_next("chat.postMessage", "ratelimited", status=429)
    SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url).post_card(make_card())
    assert len(slack_stub.called("chat.postMessage")) == 2


def test_slack_unknown_channel_is_a_config_error_and_outage_is_retryable(slack_stub):
    chat = SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url)
    slack_stub.fail_next("chat.postMessage", "channel_not_found")
    with pytest.raises(ConfigError, match="channel_not_found"):
        chat.post_card(make_card())
    slack_stub.fail_next("chat.postEphemeral", "service_unavailable", status=503)
    with pytest.raises(ProviderUnavailable):
        chat.ephemeral("C0INCIDENT", "U0ALICE", "hi")
    down = SlackChat(SecretStr("xoxb-test"), base_url="http://127.0.0.1:9/api/")
    with pytest.raises(ProviderUnavailable):
        down.post("C0INCIDENT", "escalating")


def test_slack_card_needs_a_channel(slack_stub):
    with pytest.raises(ConfigError, match="approval.channel"):
        SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url).post_card(make_card(channel=None))


def test_bot_token_is_not_in_the_config_repr():
    cfg = SlackConfig(bot_token=SecretStr("xoxb-very-secret"))
    assert "xoxb-very-secret" not in repr(cfg) and "xoxb-very-secret" not in cfg.model_dump_json()


def test_console_prints_the_card_and_waits_by_default():
    out = io.StringIO()
    chat = ConsoleChat(out=out)
    assert isinstance(chat, Chat)
    chat.post_card(make_card())
    assert "$88.49/h" in out.getvalue() and "lifeboat approve 8d4c1a52" in out.getvalue()
    assert chat.answer(make_card()) is None


def test_console_auto_approves_for_dry_runs_and_can_ask():
    decision = ConsoleChat("approve", out=io.StringIO()).answer(make_card())
    assert decision.approved and decision.via == "console"
    asked = ConsoleChat("ask", out=io.StringIO(), inp=io.StringIO("n\nalert looks flaky\n")).answer(
        make_card()
    )
    assert not asked.approved and asked.reason == "alert looks flaky"


def test_block_kit_limits_are_respected():
    blocks = card_blocks(make_card(evidence=["x" * 5000]))
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section" and "text" in b)


def test_a_drill_card_says_so():
    out = io.StringIO()
    ConsoleChat(out=out).post_card(make_card(drill=True))
    assert "DRILL: Approve failover of llama-pretrain?" in out.getvalue()
    assert card_blocks(make_card(drill=True))[0]["text"]["text"].startswith("DRILL")


def _posted(slack_stub, card):
    SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url).post_card(card)
    return slack_stub.called("chat.postMessage")[-1]["blocks"]


def _button(blocks, action_id):
    actions = next(b for b in blocks if b["type"] == "actions")["elements"]
    return next(a for a in actions if a["action_id"] == action_id)


def test_approve_asks_for_confirmation_stating_the_price_per_hour(slack_stub):
    confirm = _button(_posted(slack_stub, make_card()), "lifeboat_approve")["confirm"]
    assert confirm["title"]["text"] == "Approve the failover?"
    assert confirm["text"] == {
        "type": "plain_text",
        "text": "Fences llama-pretrain's primary and provisions gcp/us-central1 a3-highgpu-8g 8x H100 "
        "at $88.49/h, billed until the secondary is torn down.",
    }
    assert confirm["confirm"]["text"] == "Approve ($88.49/h)" and confirm["deny"]["text"] == "Back"


def test_approve_confirmation_says_when_the_price_is_unknown(slack_stub):
    confirm = _button(_posted(slack_stub, make_card(cost_per_hour=None, plan=None)), "lifeboat_approve")[
        "confirm"
    ]
    assert "the first candidate that has capacity at an unknown price per hour" in confirm["text"]["text"]
    assert confirm["confirm"]["text"] == "Approve"


def test_the_card_links_to_the_run_in_the_prefect_ui(slack_stub):
    url = "http://prefect.internal:4200/runs/flow-run/8d4c1a52-0000-4000-8000-000000000001"
    blocks = _posted(slack_stub, make_card(run_url=url))
    (context,) = [b for b in blocks if b["type"] == "context"]
    assert f"<{url}|open in Prefect>" in context["elements"][0]["text"]


HOSTILE_ALERT = "XID 79 <!channel> <@U0MALLORY> see <http://evil.example/approve|Approve here> & *now*"


def test_alert_text_cannot_inject_links_or_mentions_into_the_card(slack_stub):
    card = make_card(
        evidence=[f"gpu_health: {HOSTILE_ALERT}"],
        checkpoint="gs://ckpt/<!here>",
        prestage=["image x: <http://evil.example|ready>"],
        approvers=["U0ALICE"],
    )
    blocks = _posted(slack_stub, card)
    texts = [b["text"] for b in blocks if b["type"] == "section" and "text" in b]
    texts += [f for b in blocks if b["type"] == "section" for f in b.get("fields", [])]
    rendered = json.dumps(texts)
    for forbidden in ("<!channel>", "<@U0MALLORY>", "<http://evil", "<!here>"):
        assert forbidden not in rendered, forbidden
    assert "&lt;!channel&gt; &lt;@U0MALLORY&gt;" in texts[0]["text"] and "&amp; *now*" in texts[0]["text"]
    assert all(t["verbatim"] is True for t in texts)  # no auto-linking of bare URLs either
    (context,) = [b for b in blocks if b["type"] == "context"]
    assert "<@U0ALICE>" in context["elements"][0]["text"]  # our own mention still works


def test_a_reason_cannot_inject_into_the_updated_card(slack_stub):
    chat = SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url)
    ref = chat.post_card(make_card())
    chat.update_card(
        ref, make_card(), "Rejected by U0BOB via ui at 2026-11-30T08:05:00+00:00: <!channel> wake up"
    )
    (update,) = slack_stub.called("chat.update")
    assert "<!channel>" not in update["text"] and "<!channel>" not in json.dumps(update["blocks"])
    assert "&lt;!channel&gt; wake up" in update["text"]


def test_escaping_never_breaks_block_kit_limits_or_cuts_an_escape_in_half():
    blocks = card_blocks(make_card(evidence=["<" * 5000]))
    text = blocks[1]["text"]["text"]
    assert len(text) <= 3000 and text.endswith("&lt;…")


def test_the_ui_card_shows_every_fact_and_escapes_hostile_alert_text():
    from datetime import UTC, datetime, timedelta

    from lifeboat_dr.flows.approval_screen import card_markdown

    now = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    hostile = (
        "gpu_health: XID 79\n## Approved already [click](javascript:alert(1)) <img src=x onerror=alert(1)>"
    )
    text = card_markdown(make_card(evidence=[hostile], deadline=now + timedelta(minutes=14, seconds=5)), now)
    for fact in ("**Outage evidence:**", "**Certified checkpoint:** gs://ckpt-dr/llama/step-120000",
                 "**RPO:** 12m (target 30m)", "$88.49/h", "**Prestage:**", "**Expected RTO:** 14m (target 30m)",
                 "(14 min 5 s left; then the runbook"):  # fmt: skip
        assert fact in text, fact
    assert "\\<img" in text and "\\[click\\]" in text  # escaped: shown as text, neither HTML nor a link
    assert text.count("<") == text.count("\\<")
    assert not any(line.startswith("## Approved") for line in text.splitlines())
