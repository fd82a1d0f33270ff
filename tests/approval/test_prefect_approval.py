"""The approval gate on a real Prefect server: pause, then resume by Slack, UI, CLI or policy."""

from __future__ import annotations

import json
import time
from uuid import UUID

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run as current_run
from pydantic import SecretStr
from starlette.testclient import TestClient

from flows.approval import await_approval
from lifeboat.ledger import LedgerFile, RtoLedger
from providers.chat.slack import SlackChat
from runbooks.model import Runbook
from shell.cli import main as lifeboat
from shell.server import create_app
from shell.slack_actions import SlackSettings, slack_routes

from .conftest import (
    SIGNING_SECRET,
    click_payload,
    in_thread,
    make_card,
    make_runbook,
    signed_click,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@flow(name="approval-gate-under-test", persist_result=False)
def gate_flow(runbook_doc: dict, slack_url: str, ledger_path: str) -> dict:
    rb = Runbook.model_validate(runbook_doc)
    ledger = RtoLedger.for_runbook(rb, str(current_run.id), sink=LedgerFile(ledger_path))
    chat = SlackChat(SecretStr("xoxb-test"), base_url=slack_url)
    decision = await_approval(rb, make_card(run_id=""), chat, ledger=ledger, grace_s=20)
    return {"decision": decision.model_dump(mode="json"), "entry": ledger.entry.model_dump(mode="json")}


def _state(run_id: str) -> str:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state.type.value


def _start(tmp_path, slack_stub, **approval):
    rb = make_runbook(tmp_path, **approval)
    t = in_thread(gate_flow, rb.model_dump(mode="json"), slack_stub.base_url, str(tmp_path / "ledger.jsonl"))

    def paused_card():
        """the card is posted and the run is paused"""
        cards = slack_stub.called("chat.postMessage")
        if not cards:
            return None
        run_id = json.loads(
            next(b for b in cards[0]["blocks"] if b["type"] == "actions")["elements"][0]["value"]
        )["run_id"]
        return (run_id, cards[0]["blocks"]) if _state(run_id) == "PAUSED" else None

    run_id, blocks = wait_until(paused_card)
    return rb, t, run_id, blocks


def _finish(t) -> dict:
    t.join(timeout=90)
    assert not t.is_alive(), "the flow did not finish"
    if "error" in t.out:
        raise t.out["error"]
    return t.out["value"]


@pytest.fixture
def endpoint(slack_stub, tmp_path, prefect_server):
    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path)],
        signing_secret=SecretStr(SIGNING_SECRET),
        bot_token=SecretStr("xoxb-test"),
        base_url=slack_stub.base_url,
    )
    return TestClient(create_app(slack_routes(settings)))


def _click(client, blocks, run_id, **kw):
    signing = {k: kw.pop(k) for k in ("secret", "timestamp") if k in kw}
    headers, body = signed_click(click_payload(blocks, run_id=run_id, **kw), **signing)
    return client.post("/slack/actions", content=body, headers=headers)


def test_signed_slack_click_resumes_the_paused_run_with_the_decision(tmp_path, slack_stub, endpoint):
    _, t, run_id, blocks = _start(tmp_path, slack_stub)
    from prefect.settings import get_current_settings

    (context,) = [b for b in blocks if b["type"] == "context"]  # the card links to this paused run
    assert (
        f"<{get_current_settings().ui_url}/runs/flow-run/{run_id}|open in Prefect>"
        in context["elements"][0]["text"]
    )
    assert _click(endpoint, blocks, run_id, user="U0BOB").status_code == 200
    out = _finish(t)
    assert out["decision"] == {
        "approved": True,
        "reason": "approved in Slack",
        "approver": "U0BOB",
        "via": "slack",
    }
    assert {"approval_requested", "approval_granted"} <= set(out["entry"]["phases"])
    assert _state(run_id) == "COMPLETED"
    assert "Approved by U0BOB via slack" in slack_stub.called("chat.update")[0]["text"]

    # lifeboat serve restarted (its memory of decided runs gone): Prefect still refuses a second resume
    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path)],
        signing_secret=SecretStr(SIGNING_SECRET),
        bot_token=SecretStr("xoxb-test"),
        base_url=slack_stub.base_url,
    )
    _click(TestClient(create_app(slack_routes(settings))), blocks, run_id, user="U0ALICE", approve=False)
    assert _state(run_id) == "COMPLETED" and len(slack_stub.called("chat.update")) == 1
    assert "no longer waiting" in slack_stub.called("chat.postEphemeral")[-1]["text"]
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(run_id)]))
        )
    assert "| decided | U0BOB | approved via slack: approved in Slack |" in artifact.data


def test_bad_signature_old_timestamp_or_unknown_user_leave_the_run_paused(tmp_path, slack_stub, endpoint):
    _, t, run_id, blocks = _start(tmp_path, slack_stub)
    assert _click(endpoint, blocks, run_id, user="U0ALICE", secret="forged").status_code == 401
    assert (
        _click(endpoint, blocks, run_id, user="U0ALICE", timestamp=int(time.time()) - 360).status_code == 401
    )
    assert _click(endpoint, blocks, run_id, user="U0MALLORY").status_code == 200
    # TestClient returns after the background task ran: a wrongly resumed run would already be RUNNING
    assert _state(run_id) == "PAUSED" and slack_stub.called("chat.update") == []
    assert "not on the approver list" in slack_stub.called("chat.postEphemeral")[0]["text"]
    _click(endpoint, blocks, run_id, user="U0ALICE", approve=False)
    out = _finish(t)
    assert out["decision"]["approved"] is False and out["entry"]["outcome"] == "aborted"


def test_ui_style_resume_with_run_input_decides(tmp_path, slack_stub, prefect_server):
    from prefect.flow_runs import resume_flow_run
    from prefect.input.actions import read_flow_run_input
    from prefect.input.run_input import keyset_from_paused_state

    _, t, run_id, _ = _start(tmp_path, slack_stub)
    with get_client(sync_client=True) as client:
        paused = client.read_flow_run(UUID(run_id)).state
    form = read_flow_run_input(keyset_from_paused_state(paused)["schema"], flow_run_id=UUID(run_id))
    assert form["required"] == ["approved", "reason"]  # the UI form the on-call fills in
    assert all(field.get("description") for field in form["properties"].values())
    resume_flow_run(
        UUID(run_id), run_input={"approved": True, "reason": "capacity confirmed", "approver": "ops-lead"}
    )
    out = _finish(t)
    assert out["decision"]["via"] == "ui" and out["decision"]["approver"] == "ops-lead"
    (update,) = slack_stub.called("chat.update")  # the flow itself updates the card for non-Slack decisions
    assert "Approved by ops-lead via ui" in update["text"]


def test_lifeboat_approve_from_a_terminal_rejects_with_a_reason(
    tmp_path, slack_stub, prefect_server, capsys, monkeypatch
):
    _, t, run_id, _ = _start(tmp_path, slack_stub)
    assert (
        lifeboat(["approve", run_id, "--reject", "--reason", "primary is back", "--approver", "carol"]) == 0
    )
    out = _finish(t)
    assert out["decision"] == {
        "approved": False,
        "reason": "primary is back",
        "approver": "carol",
        "via": "cli",
    }
    assert lifeboat(["approve", run_id, "--reason", "too late"]) == 1
    assert "not waiting for approval" in capsys.readouterr().err


def test_nobody_answering_escalates_then_the_policy_decides_and_the_run_completes(
    tmp_path, slack_stub, prefect_server
):
    _, t, run_id, _ = _start(
        tmp_path,
        slack_stub,
        timeout="2s",
        escalation={"approvers": ["U0DIRECTOR"], "timeout": "2s"},
        on_timeout="proceed",
    )
    out = _finish(t)
    assert out["decision"]["via"] == "policy" and out["decision"]["approved"] is True
    assert "on_timeout=proceed" in out["decision"]["reason"]
    assert out["entry"]["notes"]["approval escalated to"] == "U0DIRECTOR"
    escalation = [m for m in slack_stub.called("chat.postMessage") if "Escalating" in m.get("text", "")]
    assert escalation and "<@U0DIRECTOR>" in escalation[0]["text"] and escalation[0]["thread_ts"]
    assert _state(run_id) == "COMPLETED"  # resumed by the policy, not failed by Prefect's pause timeout


def test_timeout_with_abort_policy_records_the_rejection(tmp_path, slack_stub, prefect_server):
    _, t, run_id, _ = _start(tmp_path, slack_stub, timeout="2s")
    out = _finish(t)
    assert out["decision"]["approved"] is False and "on_timeout=abort" in out["decision"]["reason"]
    (entry,) = LedgerFile(tmp_path / "ledger.jsonl").read("llama-pretrain")
    assert entry.outcome == "aborted" and entry.failures[0].phase == "approval_granted"
    assert "Rejected by policy" in slack_stub.called("chat.update")[0]["text"]


@flow(name="approval-gate-console", persist_result=False)
def console_gate_flow(runbook_doc: dict, mode: str) -> dict:
    import io

    from providers.chat.console import ConsoleChat

    rb = Runbook.model_validate(runbook_doc)
    ledger = RtoLedger.for_runbook(rb, str(current_run.id))
    out = io.StringIO()
    decision = await_approval(rb, make_card(run_id=""), ConsoleChat(mode, out=out), ledger=ledger)
    return {
        "decision": decision.model_dump(mode="json"),
        "console": out.getvalue(),
        "phases": sorted(ledger.entry.phases),
    }


def test_console_backend_auto_approves_a_dry_run_without_pausing(tmp_path, prefect_server):
    out = console_gate_flow(make_runbook(tmp_path).model_dump(mode="json"), "approve")
    assert out["decision"]["approved"] is True and out["decision"]["via"] == "cli"
    assert (
        "Approve failover of llama-pretrain?" in out["console"]
        and "Approved by console via cli" in out["console"]
    )
    assert out["phases"] == ["approval_granted", "approval_requested"]


def test_runbook_without_required_approval_passes_the_gate_by_policy(tmp_path, prefect_server):
    rb = make_runbook(tmp_path, required=False, approvers=[])
    out = console_gate_flow(rb.model_dump(mode="json"), "wait")
    assert out["decision"]["via"] == "policy" and out["decision"]["approved"] is True
    assert out["console"] == ""  # no card: nobody is asked


def _paused_run_ids() -> list[str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
            )
        )
    return [str(r.id) for r in runs]


def test_slack_down_during_the_incident_still_lets_the_ui_decide(tmp_path, slack_stub, prefect_server):
    from prefect.flow_runs import resume_flow_run

    slack_stub.fail_next("chat.postMessage", "service_unavailable", status=503)
    rb = make_runbook(tmp_path)
    t = in_thread(gate_flow, rb.model_dump(mode="json"), slack_stub.base_url, str(tmp_path / "ledger.jsonl"))
    (run_id,) = wait_until(_paused_run_ids)
    resume_flow_run(
        UUID(run_id), run_input={"approved": True, "reason": "Slack is down, approving in the UI"}
    )
    out = _finish(t)
    assert out["decision"]["approved"] is True and out["decision"]["via"] == "ui"
    assert out["entry"]["notes"]["approval card"].startswith("not posted: Slack chat_postMessage")


@flow(name="approval-chat-gate", persist_result=False)
def chat_gate_flow(runbook_doc: dict) -> dict:
    import io

    from flows.approval import ChatGate
    from providers.chat.console import ConsoleChat

    rb = Runbook.model_validate(runbook_doc)
    ledger = RtoLedger.for_runbook(rb, str(current_run.id))
    out = io.StringIO()
    gate = ChatGate(rb, ConsoleChat("reject", approver="dave", out=out))
    decision = gate.request(make_card(run_id="", drill=True), ledger)
    gate.notify("failover aborted")
    return {
        "decision": decision.model_dump(mode="json"),
        "console": out.getvalue(),
        "outcome": ledger.entry.outcome,
    }


def test_the_failover_flows_gate_asks_through_chat_and_keeps_the_ledger(tmp_path, prefect_server):
    out = chat_gate_flow(make_runbook(tmp_path).model_dump(mode="json"))
    assert out["decision"]["approved"] is False and out["decision"]["approver"] == "dave"
    assert out["outcome"] == "aborted"
    assert "DRILL: Approve failover" in out["console"] and out["console"].rstrip().endswith(
        "failover aborted"
    )
