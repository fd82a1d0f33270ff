"""A failback is asked for as a failback (console and Slack: title, buttons, confirm dialogs,
fallback text), and what a drill's gate posts in chat begins DRILL, as its card does."""

import io
import json

from pydantic import SecretStr

from lifeboat_dr.flows.approval import ChatGate
from lifeboat_dr.flows.wiring import build_gate
from lifeboat_dr.providers.chat.console import ConsoleChat
from lifeboat_dr.providers.chat.slack import SlackChat

from .conftest import make_card


def test_the_console_asks_to_approve_the_failback():
    out = io.StringIO()
    ConsoleChat(out=out).post_card(make_card(action="failback"))
    assert out.getvalue().startswith("== Approve failback of llama-pretrain? (run ")


def test_the_slack_card_of_a_failback_never_says_failover(slack_stub):
    SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url).post_card(make_card(action="failback"))
    (posted,) = slack_stub.called("chat.postMessage")
    assert posted["text"].startswith("Failback approval needed for llama-pretrain")
    assert posted["blocks"][0]["text"]["text"] == "Failback approval: llama-pretrain"
    actions = next(b for b in posted["blocks"] if b["type"] == "actions")["elements"]
    approve, reject = actions
    assert approve["text"]["text"] == "Approve failback"
    assert approve["confirm"]["title"]["text"] == "Approve the failback?"
    assert "resumes the job on its recovered primary" in approve["confirm"]["text"]["text"]
    assert reject["confirm"]["title"]["text"] == "Reject the failback?"
    assert reject["confirm"]["text"]["text"] == "The job keeps running on the secondary."
    assert "ailover" not in posted["text"] + json.dumps(posted["blocks"])


def test_a_serving_card_says_serving_failover(slack_stub):
    SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url).post_card(make_card(action="serving"))
    (posted,) = slack_stub.called("chat.postMessage")
    assert posted["blocks"][0]["text"]["text"] == "Serving failover approval: llama-pretrain"


def test_a_drill_gate_says_drill_in_every_notification_it_posts_to_slack(slack_stub, runbook):
    chat = SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url)
    ChatGate(runbook, chat, drill=True).notify(
        "Lifeboat failover of llama-pretrain failed before fenced: boom"
    )
    ChatGate(runbook, chat).notify("Lifeboat failover of llama-pretrain failed before fenced: boom")
    drill, real = slack_stub.called("chat.postMessage")
    assert drill["text"] == "DRILL: Lifeboat failover of llama-pretrain failed before fenced: boom"
    assert real["text"] == "Lifeboat failover of llama-pretrain failed before fenced: boom"
    assert drill["channel"] == "C0INCIDENT"


def test_a_dry_run_builds_a_drill_gate(runbook):
    assert build_gate(runbook, console="approve", drill=True).drill
    assert not build_gate(runbook, console="approve").drill
