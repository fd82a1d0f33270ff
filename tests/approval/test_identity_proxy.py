"""The production approval path: Prefect with its own password, HAProxy authenticating people
(`deploy/haproxy/lifeboat.cfg`), lifeboat serve signing what they decide. Attacks first."""

from __future__ import annotations

import base64
import io
import shutil
from uuid import UUID

import httpx
import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run as current_run
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.approval import await_approval
from lifeboat_dr.flows.wiring import new_ledger
from lifeboat_dr.providers.chat.console import ConsoleChat
from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.shell.cli import main as lifeboat
from tests.peers import needs

from .conftest import in_thread, make_card, make_runbook, wait_until
from .identity_stack import PEOPLE, identity_stack

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    needs(None if shutil.which("haproxy") else "no haproxy here (apt-get install haproxy)"),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, approval_keys):
    with identity_stack(tmp_path_factory.mktemp("identity"), approval_keys) as s:
        yield s


def as_worker(stack):
    """Prefect settings of a worker: the server itself, with its shared password."""
    return temporary_settings(
        updates={PREFECT_API_URL: f"{stack.prefect_url}/api", PREFECT_API_AUTH_STRING: stack.server_auth}
    )


def basic(login: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()}


@flow(name="approval-gate-behind-the-proxy", persist_result=False)
def proxied_gate(runbook_doc: dict, ledger_path: str) -> dict:
    rb = Runbook.model_validate(runbook_doc)
    ledger = new_ledger(rb, str(current_run.id), sink=LedgerFile(ledger_path))
    chat = ConsoleChat("wait", out=io.StringIO())
    decision = await_approval(rb, make_card(run_id=""), chat, ledger=ledger, grace_s=20)
    return {"decision": decision.model_dump(mode="json"), "entry": ledger.entry.model_dump(mode="json")}


def _state(run_id: str) -> str:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state.type.value


def _paused_run() -> str | None:
    """the gate's run is paused"""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
            )
        )
    return str(runs[0].id) if runs else None


def _refusals(ledger_path, run_id: str, n: int):
    def refused():
        (entry,) = [e for e in LedgerFile(ledger_path).read("llama-pretrain") if e.run_id == run_id] or [None]
        note = entry.notes.get("approval refused", "") if entry else ""
        return note if note and note.count("; ") + 1 == n and _state(run_id) == "PAUSED" else None

    return wait_until(refused)


def test_every_forged_path_is_refused_and_a_verified_approver_decides(stack, tmp_path, monkeypatch, capsys):
    ledger_path = tmp_path / "ledger.jsonl"
    with as_worker(stack):
        t = in_thread(proxied_gate, make_runbook(tmp_path).model_dump(mode="json"), str(ledger_path))
        run_id = wait_until(_paused_run)
    resume = f"/api/flow_runs/{run_id}/resume"
    forged = {"run_input": {"approved": True, "reason": "go", "approver": "U0ALICE", "via": "slack"}}

    # 1. No credentials, straight to Prefect: its own auth refuses before anything runs.
    assert httpx.post(stack.prefect_url + resume, json=forged).status_code == 401
    # 2. No credentials, or a wrong password, at the proxy.
    assert httpx.post(stack.proxy_url + resume, json=forged).status_code == 401
    bad = basic("alice@example.com", "guess")
    assert httpx.post(stack.proxy_url + resume, json=forged, headers=bad).status_code == 401
    # 3. Straight to lifeboat serve, naming a user without the proxy's secret.
    headers = {"x-lifeboat-user": "alice@example.com", "x-lifeboat-proxy-secret": "guess"}
    assert httpx.post(stack.serve_url + resume, json=forged, headers=headers).status_code == 401
    with as_worker(stack):
        assert _state(run_id) == "PAUSED"

        # 4. With the workers' shared password (a leaked worker config): Prefect accepts the
        #    resume, the flow refuses it as unsigned, records it and pauses again.
        worker = {"Authorization": "Basic " + base64.b64encode(stack.server_auth.encode()).decode()}
        r = httpx.post(stack.prefect_url + resume, json=forged, headers=worker)
        assert r.status_code in (200, 201) and r.json()["status"] == "ACCEPT"
        assert "U0ALICE: not signed by Slack or the identity proxy" in _refusals(ledger_path, run_id, 1)

    # 5. Mallory through the proxy, claiming Alice in the identity header: the proxy replaces
    #    it with the login it verified, and Mallory is not on the allow-list.
    spoof = basic("mallory@example.com", PEOPLE["mallory@example.com"]) | {
        "x-lifeboat-user": "alice@example.com"
    }
    r = httpx.post(
        stack.proxy_url + resume, json={"run_input": {"approved": True, "reason": "me"}}, headers=spoof
    )
    assert r.status_code in (200, 201), r.text
    with as_worker(stack):
        note = _refusals(ledger_path, run_id, 2)
    assert "mallory@example.com (via ui) is not an approver for this runbook" in note

    # 6. `lifeboat approve` through the proxy with a wrong password: one line, exit 1.
    wrong = {PREFECT_API_URL: f"{stack.proxy_url}/api", PREFECT_API_AUTH_STRING: "alice@example.com:guess"}
    with temporary_settings(updates=wrong):
        assert lifeboat(["approve", run_id, "--reason", "guessing"]) == 1
    assert "refused your credentials" in capsys.readouterr().err

    # 7. Mallory with `lifeboat approve` through the proxy: signed as Mallory, refused by the
    #    run, and the command waits for that verdict and says so (exit 1), not "sent".
    as_mallory = {
        PREFECT_API_URL: f"{stack.proxy_url}/api",
        PREFECT_API_AUTH_STRING: f"mallory@example.com:{PEOPLE['mallory@example.com']}",
    }
    with temporary_settings(updates=as_mallory):
        assert lifeboat(["approve", run_id, "--reason", "trust me"]) == 1
    err = capsys.readouterr().err
    assert (
        "refused your decision to approve" in err
        and "mallory@example.com (via cli) is not an approver" in err
    )
    with as_worker(stack):
        _refusals(ledger_path, run_id, 3)

    # 8. Alice with `lifeboat approve` through the proxy: her login, verified, on the list; the
    #    command returns once the run accepted it.
    proxy_settings = {
        PREFECT_API_URL: f"{stack.proxy_url}/api",
        PREFECT_API_AUTH_STRING: f"alice@example.com:{PEOPLE['alice@example.com']}",
    }
    with temporary_settings(updates=proxy_settings):
        assert lifeboat(["approve", run_id, "--reason", "region confirmed down"]) == 0
    assert "accepted your decision to approve" in capsys.readouterr().out
    t.join(timeout=90)
    assert "value" in t.out, t.out.get("error")
    out = t.out["value"]
    assert out["decision"] == {
        "approved": True,
        "reason": "region confirmed down",
        "approver": "alice@example.com",
        "via": "cli",
    }
    assert out["entry"]["notes"]["approval refused"].count("; ") == 2  # the three that reached the flow
    with as_worker(stack):
        assert _state(run_id) == "COMPLETED"


@pytest.fixture
def pretrain(tmp_path, monkeypatch):
    """The pretraining example, Alice's login mapped to its first on-call, the ledger here."""
    import shutil as sh
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sh.copytree(root / "runbooks", tmp_path / "runbooks")
    path = tmp_path / "runbooks" / "llama-70b-pretrain.yaml"
    line = "  approvers: [U01ONCALL01, U01ONCALL02]\n"
    path.write_text(path.read_text().replace(line, line + "  logins: {U01ONCALL01: [alice@example.com]}\n"))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def test_cancel_on_a_paused_failover_ends_it_at_once_as_rejected_and_nothing_is_fenced(stack, pretrain):
    """Prefect's Cancel (the UI's button: set_state Cancelling, force) on a failover paused at
    its gate: through the proxy as Alice, recorded with her login; the run ends within
    seconds, Cancelled, the rejection in its ledger, no fence. A person can set no other state."""
    import time

    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.failover import failover, outcome_of

    with as_worker(stack):
        t = in_thread(failover, str(pretrain), dry_run=True, approval="wait", return_state=True)
        run_id = wait_until(_paused_run, timeout=300)
    alice = basic("alice@example.com", PEOPLE["alice@example.com"])
    state_url = f"{stack.proxy_url}/api/flow_runs/{run_id}/set_state"
    for kind in ("RUNNING", "COMPLETED", "SCHEDULED"):  # around the gate: refused
        body = {"state": {"type": kind}, "force": True}
        assert httpx.post(state_url, json=body, headers=alice).status_code == 403
    with as_worker(stack):
        assert _state(run_id) == "PAUSED"
        from lifeboat_dr.providers.orchestrator.prefect_api import read_run_input

        ask = read_run_input(run_id, "lifeboat-ask")  # what a person's signature would answer
    assert ask["run_id"] == run_id and ask["runbook"] == "llama-70b-pretrain" and ask["action"] == "failover"
    assert isinstance(ask["epoch"], int)
    cancelled_at = time.monotonic()
    r = httpx.post(
        state_url, json={"state": {"type": "CANCELLING", "name": "Cancelling"}, "force": True}, headers=alice
    )
    assert r.status_code in (200, 201) and r.json()["status"] == "ACCEPT", r.text
    t.join(timeout=60)
    assert time.monotonic() - cancelled_at < 30, "the run waited out its pause instead of ending"
    assert "value" in t.out, t.out.get("error")
    assert outcome_of(t.out["value"])["outcome"] == "aborted"
    with as_worker(stack):
        assert _state(run_id) == "CANCELLED"
    (entry,) = [
        e
        for e in LedgerFile(pretrain.parent.parent / "ledger.jsonl").read("llama-70b-pretrain")
        if e.run_id == run_id
    ]
    assert entry.outcome == "aborted"
    assert "cancelled by alice@example.com through the identity proxy" in entry.notes["approval"]
    assert not {"fenced", "fence"} & set(entry.phases), entry.phases
