"""The approval card says, to each viewer, whether they may decide. The Prefect UI shows one
card (the paused form's description) to everyone, so the identity proxy sends that read to
`lifeboat serve`, which heads it with the verdict for the login the proxy verified, from the
deciders the gate published. Real stack: Prefect with its own password, HAProxy with
deploy/haproxy/lifeboat.cfg, `lifeboat serve`; and headless Chromium for the screen."""

from __future__ import annotations

import json
import re
import shutil
from uuid import UUID

import httpx
import pytest
from prefect.client.orchestration import get_client
from starlette.testclient import TestClient

from lifeboat_dr.core.approval import ApprovalProcess, viewer_may_decide
from lifeboat_dr.shell.approvals import ProxySettings, approval_routes
from lifeboat_dr.shell.server import create_app
from tests.peers import needs

from .conftest import T0, in_thread, make_runbook, wait_until
from .identity_stack import PEOPLE, identity_stack
from .test_approval_screen import CHROMIUM, SHOTS, _why_skip
from .test_identity_proxy import _paused_run, as_worker, basic, proxied_gate


def shown(markdown: str) -> str:
    """What Markdown renders of escaped text (every punctuation character may be escaped)."""
    return re.sub(r"\\(.)", r"\1", markdown)


RUN = "8d4c1a52-0000-4000-8000-000000000001"
DECIDERS = {"U0ALICE": ["alice@example.com"], "U0BOB": ["bob"]}


def test_the_line_for_an_approver_someone_else_and_nobody_logged_in(tmp_path):
    process = ApprovalProcess.from_runbook(make_runbook(tmp_path).approval, T0)
    assert process.deciders() == DECIDERS  # what the gate publishes
    assert shown(viewer_may_decide("alice@example.com", DECIDERS)) == (
        "**You (alice@example.com) may approve or reject** (approver U0ALICE)."
    )
    assert shown(viewer_may_decide("mallory@example.com", DECIDERS)) == (
        "**You (mallory@example.com) may not decide:** not among the approvers' logins "
        "(approval.logins: alice@example.com, bob); a decision you send is refused and recorded."
    )
    assert viewer_may_decide(None, DECIDERS).startswith("**Log in** through the identity proxy")
    assert "\\*" in viewer_may_decide("**admin**", DECIDERS)  # a login renders as its characters


@pytest.fixture
def screen_route(approval_keys):
    inputs = {
        (RUN, "paused-1-description"): "## Failover approval: llama-pretrain",
        (RUN, "lifeboat-deciders"): DECIDERS,
    }
    settings = ProxySettings(proxy_secret="s3cret")
    routes = approval_routes(settings, approval_keys.signing, read_input=lambda r, k: inputs.get((r, k)))
    return TestClient(create_app(routes), raise_server_exceptions=False)


def test_the_card_route_refuses_what_did_not_come_through_the_proxy_with_a_login(screen_route):
    url = f"/api/flow_runs/{RUN}/input/paused-1-description"
    secret = {"x-lifeboat-proxy-secret": "s3cret"}
    assert screen_route.get(url, headers={"x-lifeboat-user": "alice@example.com"}).status_code == 401
    anonymous = screen_route.get(url, headers=secret)
    assert anonymous.status_code == 401 and "log in" in anonymous.json()["detail"]
    as_alice = secret | {"x-lifeboat-user": "alice@example.com"}
    assert screen_route.get(f"/api/flow_runs/{RUN}/input/lifeboat-ask", headers=as_alice).status_code == 404
    r = screen_route.get(url, headers=as_alice)
    assert r.status_code == 200
    assert shown(json.loads(r.text)) == (
        "**You (alice@example.com) may approve or reject** (approver U0ALICE).\n\n"
        "## Failover approval: llama-pretrain"
    )


needs_haproxy = needs(None if shutil.which("haproxy") else "no haproxy (apt-get install haproxy)")


@pytest.fixture(scope="module")
def paused(tmp_path_factory, approval_keys):
    """The identity stack with the gate's run paused at its card; (stack, run id, card key)."""
    folder = tmp_path_factory.mktemp("viewer")
    with identity_stack(folder, approval_keys) as stack:
        with as_worker(stack):
            t = in_thread(
                proxied_gate, make_runbook(folder).model_dump(mode="json"), str(folder / "ledger.jsonl")
            )
            run_id = wait_until(_paused_run)
            with get_client(sync_client=True) as client:
                key = client.read_flow_run(UUID(run_id)).state.state_details.run_input_keyset["description"]
        yield stack, run_id, key
        with as_worker(stack), get_client(sync_client=True) as client:
            from prefect.states import Cancelled

            client.set_flow_run_state(UUID(run_id), Cancelled(), force=True)
        t.join(timeout=60)


@pytest.mark.integration
@pytest.mark.processes
@needs_haproxy
def test_each_viewer_reads_whether_they_may_decide_through_the_proxy(paused):
    stack, run_id, key = paused
    url = f"{stack.proxy_url}/api/flow_runs/{run_id}/input/{key}"
    as_alice = httpx.get(url, headers=basic("alice@example.com", PEOPLE["alice@example.com"]))
    as_mallory = httpx.get(url, headers=basic("mallory@example.com", PEOPLE["mallory@example.com"]))
    anonymous = httpx.get(url)

    assert as_alice.status_code == 200, as_alice.text
    alice_card = shown(json.loads(as_alice.text))
    assert alice_card.startswith(
        "**You (alice@example.com) may approve or reject** (approver U0ALICE).\n\n## "
    )
    mallory_card = shown(json.loads(as_mallory.text))
    assert mallory_card.startswith(
        "**You (mallory@example.com) may not decide:** not among the approvers' logins"
    )
    assert alice_card.split("\n\n", 1)[1] == mallory_card.split("\n\n", 1)[1]  # the same card beneath
    assert anonymous.status_code == 401 and "log in" in anonymous.json()["detail"]


@pytest.mark.integration
@pytest.mark.processes
@pytest.mark.browser
@needs(_why_skip())
def test_the_prefect_ui_shows_each_viewer_whether_they_may_decide(paused):
    from playwright.sync_api import expect, sync_playwright

    stack, run_id, _ = paused
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            anonymous = browser.new_page(viewport={"width": 1400, "height": 1100})
            # Nobody logged in: every API read is refused (401, "log in: …"); Prefect's UI says
            # "Authentication failed." and shows no run, no card (its login page is /login).
            anonymous.goto(f"{stack.proxy_url}/runs/flow-run/{run_id}")
            expect(anonymous.get_by_text("Authentication failed").first).to_be_visible(timeout=60_000)
            expect(anonymous.get_by_text("Failover approval")).to_have_count(0)
            anonymous.screenshot(path=SHOTS / "viewer-anonymous.png", full_page=True)
            for login, expected, shot in (
                ("alice@example.com", "You (alice@example.com) may approve or reject", "viewer-may.png"),
                ("mallory@example.com", "You (mallory@example.com) may not decide:", "viewer-may-not.png"),
            ):
                page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
                page.goto(f"{stack.proxy_url}/login?redirect=/runs/flow-run/{run_id}")
                password = page.locator("input[type=password]")
                password.wait_for(timeout=60_000)
                password.fill(f"{login}:{PEOPLE[login]}")
                password.press("Enter")
                page.wait_for_url("**/runs/flow-run/**", timeout=60_000)
                page.goto(f"{stack.proxy_url}/runs/flow-run/{run_id}")
                page.get_by_role("button", name="Resume").click()
                dialog = page.get_by_role("dialog")
                expect(dialog.get_by_text(expected).first).to_be_visible(timeout=30_000)
                page.screenshot(path=SHOTS / shot, full_page=True)
        finally:
            browser.close()
