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

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.approval import await_approval
from lifeboat_dr.flows.wiring import new_ledger
from lifeboat_dr.providers.chat.slack import SlackChat
from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.shell.cli import main as lifeboat
from lifeboat_dr.shell.server import create_app
from lifeboat_dr.shell.slack_actions import SlackSettings, slack_routes

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
    ledger = new_ledger(rb, str(current_run.id), sink=LedgerFile(ledger_path))
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
def endpoint(slack_stub, tmp_path, prefect_server, approval_keys):
    settings = SlackSettings.from_runbooks(
        [make_runbook(tmp_path)],
        signing_secret=SecretStr(SIGNING_SECRET),
        bot_token=SecretStr("xoxb-test"),
        base_url=slack_stub.base_url,
    )
    return TestClient(create_app(slack_routes(settings, signing_key=approval_keys.signing)))


def _click(client, blocks, run_id, **kw):
    signing = {k: kw.pop(k) for k in ("secret", "timestamp") if k in kw}
    headers, body = signed_click(click_payload(blocks, run_id=run_id, **kw), **signing)
    return client.post("/slack/actions", content=body, headers=headers)


def test_signed_slack_click_resumes_the_paused_run_with_the_decision(
    tmp_path, slack_stub, endpoint, approval_keys
):
    _, t, run_id, blocks = _start(tmp_path, slack_stub)
    from prefect.settings import get_current_settings

    (context,) = [b for b in blocks if b["type"] == "context"]  # the card links to this paused run
    assert (
        f"<{get_current_settings().ui_url}/runs/flow-run/{run_id}|open in Prefect>"
        in context["elements"][0]["text"]
    )
    assert _click(endpoint, blocks, run_id, user="U0BOB").is_success
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
    again = TestClient(create_app(slack_routes(settings, signing_key=approval_keys.signing)))
    _click(again, blocks, run_id, user="U0ALICE", approve=False)
    assert _state(run_id) == "COMPLETED" and len(slack_stub.called("chat.update")) == 1
    assert "no longer waiting" in slack_stub.called("chat.postEphemeral")[-1]["text"]
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(run_id)]))
        )
    assert "| decided | U0BOB | approved via slack\\: approved in Slack |" in artifact.data  # escaped: text


def test_bad_signature_old_timestamp_or_unknown_user_leave_the_run_paused(tmp_path, slack_stub, endpoint):
    _, t, run_id, blocks = _start(tmp_path, slack_stub)
    assert _click(endpoint, blocks, run_id, user="U0ALICE", secret="forged").status_code == 401
    assert (
        _click(endpoint, blocks, run_id, user="U0ALICE", timestamp=int(time.time()) - 360).status_code == 401
    )
    assert _click(endpoint, blocks, run_id, user="U0MALLORY").is_success
    # TestClient returns after the background task ran: a wrongly resumed run would already be RUNNING
    assert _state(run_id) == "PAUSED" and slack_stub.called("chat.update") == []
    assert "not on the approver list" in slack_stub.called("chat.postEphemeral")[0]["text"]
    _click(endpoint, blocks, run_id, user="U0ALICE", approve=False)
    out = _finish(t)
    assert out["decision"]["approved"] is False and out["entry"]["outcome"] == "aborted"


PROXY_SECRET = "proxy-secret-for-tests"


def _proxied(
    keys,
    run_id: str,
    login: str,
    *,
    approved: bool = True,
    reason: str = "capacity confirmed",
    agent="Mozilla/5.0",
):
    """A decision arriving through the identity proxy: lifeboat serve's route, with the
    headers only the proxy sets."""
    from lifeboat_dr.shell.approvals import ProxySettings, approval_routes

    app = create_app(approval_routes(ProxySettings(proxy_secret=PROXY_SECRET), keys.signing))
    return TestClient(app).post(
        f"/api/flow_runs/{run_id}/resume",
        json={"run_input": {"approved": approved, "reason": reason}},
        headers={"x-lifeboat-proxy-secret": PROXY_SECRET, "x-lifeboat-user": login, "user-agent": agent},
    )


def _wait_paused_again(run_id: str, refusals: int, ledger_path) -> str:
    """the run refused a resume, recorded it, and is paused again"""

    def refused():
        entries = [e for e in LedgerFile(ledger_path).read("llama-pretrain") if e.run_id == run_id]
        note = entries[0].notes.get("approval refused", "") if entries else ""
        return note if note.count("; ") + 1 == refusals and note and _state(run_id) == "PAUSED" else None

    return wait_until(refused)


def test_the_ui_form_carries_the_card_and_asks_only_verdict_and_reason(
    tmp_path, slack_stub, prefect_server, approval_keys
):
    from prefect.input.actions import read_flow_run_input
    from prefect.input.run_input import keyset_from_paused_state

    _, t, run_id, _ = _start(tmp_path, slack_stub)
    with get_client(sync_client=True) as client:
        paused = client.read_flow_run(UUID(run_id)).state
    keys = keyset_from_paused_state(paused)
    form = read_flow_run_input(keys["schema"], flow_run_id=UUID(run_id))
    card = read_flow_run_input(keys["description"], flow_run_id=UUID(run_id))
    assert list(form["properties"]) == ["approved", "reason"] == form["required"]
    for fact in (
        "6/8 GPUs XID 79",
        "step-120000",
        "12m (target 30m)",
        "$88.49/h",
        "weights: 3/3 copied",
        "14m (target 30m)",
        "left; then",
    ):
        assert fact in card, fact
    assert _proxied(approval_keys, run_id, "bob", approved=False, reason="primary recovered").is_success
    out = _finish(t)
    assert out["decision"] == {
        "approved": False,
        "reason": "primary recovered",
        "approver": "bob",
        "via": "ui",
    }


def test_forged_rest_resumes_are_refused_recorded_and_the_policy_still_decides(
    tmp_path, slack_stub, prefect_server, capsys, approval_keys
):
    """Attacks on a real Prefect server: a bare REST resume claiming an allow-listed Slack user
    via slack, the same typed into the UI form, `lifeboat approve` sent straight to Prefect,
    and a login off the allow-list through the proxy. None decides; the run keeps waiting and
    the runbook's on_timeout applies at the deadline."""
    from prefect.flow_runs import resume_flow_run

    ledger_path = tmp_path / "ledger.jsonl"
    _, t, run_id, _ = _start(tmp_path, slack_stub, timeout="12s")

    resume_flow_run(
        UUID(run_id), run_input={"approved": True, "reason": "go", "approver": "U0ALICE", "via": "slack"}
    )
    assert "U0ALICE: not signed by Slack or the identity proxy" in _wait_paused_again(run_id, 1, ledger_path)

    resume_flow_run(
        UUID(run_id),
        run_input={"approved": True, "reason": "typed in the form", "approver": "alice@example.com"},
    )
    _wait_paused_again(run_id, 2, ledger_path)

    # Prefect takes it, the flow does not, and `lifeboat approve` says so: nothing signed it
    assert lifeboat(["approve", run_id, "--reason", "straight to Prefect"]) == 1
    assert "not through the identity proxy" in capsys.readouterr().err
    _wait_paused_again(run_id, 3, ledger_path)

    assert _proxied(approval_keys, run_id, "mallory@example.com", agent="prefect/3.9.1").is_success
    note = _wait_paused_again(run_id, 4, ledger_path)
    assert "mallory@example.com (via cli) is not an approver for this runbook" in note

    out = _finish(t)  # nobody verified decided: on_timeout=abort at the deadline
    assert out["decision"]["via"] == "policy" and out["decision"]["approved"] is False
    assert out["entry"]["outcome"] == "aborted" and _state(run_id) == "COMPLETED"
    assert "Rejected by policy" in slack_stub.called("chat.update")[0]["text"]
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(run_id)]))
        )
    assert artifact.data.count("| refused |") == 4


def test_a_forged_signature_or_a_replay_from_another_run_is_refused(
    tmp_path, slack_stub, prefect_server, approval_keys
):
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from prefect.flow_runs import resume_flow_run

    from lifeboat_dr.core.approval_proof import Ask, sign_decision
    from lifeboat_dr.providers.chat.base import ApprovalDecision

    ledger_path = tmp_path / "ledger.jsonl"
    _, t, run_id, _ = _start(tmp_path, slack_stub)
    alice = ApprovalDecision(approved=True, reason="go", approver="U0ALICE", via="slack")
    ask = Ask(run_id, "llama-pretrain", "failover", None)
    guessed = sign_decision(Ed25519PrivateKey.generate(), ask, alice, datetime.now(UTC))
    resume_flow_run(UUID(run_id), run_input=guessed)
    _wait_paused_again(run_id, 1, ledger_path)
    other = Ask("8d4c1a52-0000-4000-8000-00000000beef", "llama-pretrain", "failover", None)
    other_run = sign_decision(approval_keys.signing, other, alice, datetime.now(UTC))
    resume_flow_run(UUID(run_id), run_input=other_run)
    _wait_paused_again(run_id, 2, ledger_path)
    failback = sign_decision(
        approval_keys.signing, Ask(run_id, "llama-pretrain", "failback", None), alice, datetime.now(UTC)
    )
    resume_flow_run(UUID(run_id), run_input=failback)
    _wait_paused_again(run_id, 3, ledger_path)
    mallory = ApprovalDecision(approved=True, reason="me", approver="U0MALLORY", via="slack")
    signed = sign_decision(approval_keys.signing, ask, mallory, datetime.now(UTC))
    resume_flow_run(UUID(run_id), run_input=signed)  # signed, but not an approver
    _wait_paused_again(run_id, 4, ledger_path)
    resume_flow_run(UUID(run_id), run_input=signed)  # the same signature again
    note = _wait_paused_again(run_id, 5, ledger_path)
    assert note.count("bad signature") == 2 and "signed for action 'failback'" in note
    assert "U0MALLORY (via slack) is not an approver" in note and "already used at this gate" in note
    assert _proxied(approval_keys, run_id, "alice@example.com").is_success
    out = _finish(t)
    assert out["decision"]["approver"] == "alice@example.com" and out["decision"]["via"] == "ui"


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

    from lifeboat_dr.providers.chat.console import ConsoleChat

    rb = Runbook.model_validate(runbook_doc)
    ledger = new_ledger(rb, str(current_run.id))
    out = io.StringIO()
    decision = await_approval(rb, make_card(run_id=""), ConsoleChat(mode, out=out), ledger=ledger)
    return {
        "decision": decision.model_dump(mode="json"),
        "console": out.getvalue(),
        "phases": sorted(ledger.entry.phases),
    }


def test_console_backend_auto_approves_a_dry_run_without_pausing(tmp_path, prefect_server):
    out = console_gate_flow(make_runbook(tmp_path).model_dump(mode="json"), "approve")
    assert out["decision"]["approved"] is True and out["decision"]["via"] == "console"
    assert (
        "Approve failover of llama-pretrain?" in out["console"]
        and "Approved by console via console" in out["console"]
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


def test_slack_down_during_the_incident_still_lets_the_ui_decide(
    tmp_path, slack_stub, prefect_server, approval_keys
):
    slack_stub.fail_next("chat.postMessage", "service_unavailable", status=503)
    rb = make_runbook(tmp_path)
    others = set(_paused_run_ids())  # the shared server may hold other tests' paused runs
    t = in_thread(gate_flow, rb.model_dump(mode="json"), slack_stub.base_url, str(tmp_path / "ledger.jsonl"))
    (run_id,) = wait_until(lambda: [r for r in _paused_run_ids() if r not in others])
    assert _proxied(
        approval_keys, run_id, "alice@example.com", reason="Slack is down, approving in the UI"
    ).is_success
    out = _finish(t)
    assert out["decision"]["approved"] is True and out["decision"]["via"] == "ui"
    assert out["entry"]["notes"]["approval"].startswith("approved by alice@example.com via ui")
    assert out["entry"]["notes"]["approval card"].startswith("not posted: Slack chat_postMessage")


@flow(name="approval-chat-gate", persist_result=False)
def chat_gate_flow(runbook_doc: dict) -> dict:
    import io

    from lifeboat_dr.flows.approval import ChatGate
    from lifeboat_dr.providers.chat.console import ConsoleChat

    rb = Runbook.model_validate(runbook_doc)
    ledger = new_ledger(rb, str(current_run.id))
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


def test_a_flow_parameter_cannot_approve_a_real_failover(prefect_server):
    """Anyone who can start a run could pass approval=approve: only dry runs, drills and
    local runbooks may decide without a person."""
    from pathlib import Path

    from lifeboat_dr.flows.failover import failover

    runbook = Path(__file__).resolve().parents[2] / "runbooks" / "llama-70b-pretrain.yaml"
    state = failover(str(runbook), approval="approve", force=True, return_state=True)
    assert state.is_failed() and "approval=approve decides without a person" in state.message


HOSTILE_APPROVER = (
    "x\n\n# APPROVED by alice\n\n[open the runbook](http://evil.example/phish) "
    "![tracker](http://evil.example/pixel.png) <img src=http://evil.example/i.png> | forged | cell |"
)


def test_markdown_in_a_resume_renders_as_text_and_is_capped(
    tmp_path, slack_stub, prefect_server, approval_keys
):
    """A bare resume whose approver and reason are Markdown and HTML: refused (unsigned), and
    the approval trail and the ledger keep it as one capped line of text: no heading, link,
    image or extra table cell comes of it."""
    from markdown_it import MarkdownIt
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.flow_runs import resume_flow_run

    ledger_path = tmp_path / "ledger.jsonl"
    _, t, run_id, _ = _start(tmp_path, slack_stub)
    reason = "## the primary is down\n" + "A" * 20_000
    resume_flow_run(
        UUID(run_id), run_input={"approved": True, "reason": reason, "approver": HOSTILE_APPROVER}
    )
    note = _wait_paused_again(run_id, 1, ledger_path)
    assert "\n" not in note and len(note) < 1000
    assert _proxied(approval_keys, run_id, "alice@example.com", reason="[ok](http://x) # fine").is_success
    out = _finish(t)
    assert "\n" not in out["entry"]["notes"]["approval"]
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(run_id)]))
        )
    html = MarkdownIt("commonmark").enable("table").render(artifact.data)
    assert html.count("<h1>") == 1 and "<h2>" not in html  # only the artifact's own title
    assert "<a " not in html and "<img" not in html and "evil.example/i.png>" not in html
    rows = [r for r in html.split("<tr>")[2:]]
    assert all(r.count("<td>") == 4 for r in rows), rows  # no cell smuggled in with a `|`
    assert "# APPROVED by alice" in html  # still readable, as text
    assert len(artifact.data) < 4000  # capped: 20,000 characters of reason do not land here


def test_nothing_a_worker_or_the_prefect_api_holds_can_sign_a_person(
    tmp_path, slack_stub, prefect_server, approval_keys
):
    """The issue's forgeries, on a real Prefect server: an old-style key left in the Secret
    block `lifeboat-approval-key`, a Prefect Variable, and the worker's whole environment (what
    a `job_variables.command` could copy out). Whatever is signed with any of it — HMAC as
    before, or an Ed25519 key derived from it — is refused; the run waits; Alice still decides."""
    import hashlib
    import hmac
    import os
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from prefect.blocks.system import Secret
    from prefect.flow_runs import resume_flow_run
    from prefect.variables import Variable

    from lifeboat_dr.core.approval_proof import Ask, sign_decision
    from lifeboat_dr.providers.chat.base import ApprovalDecision

    Secret(value="key-left-in-the-block").save("lifeboat-approval-key", overwrite=True)
    Variable.set("copied_env", dict(os.environ), overwrite=True)
    ledger_path = tmp_path / "ledger.jsonl"
    _, t, run_id, _ = _start(tmp_path, slack_stub)
    loot = {Secret.load("lifeboat-approval-key").get(), *Variable.get("copied_env").values()}
    alice = ApprovalDecision(approved=True, reason="forged", approver="alice@example.com", via="ui")
    ask = Ask(run_id, "llama-pretrain", "failover", None)
    tried = 0
    for material in sorted(v for v in loot if isinstance(v, str) and v)[:40]:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        message = json.dumps([run_id, True, "forged", "alice@example.com", "ui", at], separators=(",", ":"))
        mac = hmac.new(material.encode(), message.encode(), hashlib.sha256).hexdigest()
        seeded = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(material.encode()).digest())
        for forged in (
            {"approved": True, "reason": "forged", "approver": "alice@example.com", "via": "ui", "signed_at": at, "signature": mac},
            sign_decision(seeded, ask, alice, datetime.now(UTC)),
        ):  # fmt: skip
            resume_flow_run(UUID(run_id), run_input=forged)
            tried += 1
            _wait_paused_again(run_id, tried, ledger_path)
            if tried >= 6:
                break
        if tried >= 6:
            break
    assert _state(run_id) == "PAUSED"
    assert _proxied(approval_keys, run_id, "alice@example.com", reason="really down").is_success
    out = _finish(t)
    assert out["decision"]["reason"] == "really down" and out["decision"]["approver"] == "alice@example.com"
    assert out["entry"]["notes"]["approval refused"].count("bad signature") == tried
