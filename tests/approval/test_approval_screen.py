"""The on-call's path in a real browser: headless Chromium (Debian's package, driven by
Playwright; nothing downloaded) opens a paused failover in the Prefect UI behind the identity
proxy, reads the card, approves with a reason, and the run completes. Screenshots land in
`.lifeboat/test-artifacts/browser/` (or $LIFEBOAT_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client

from lifeboat_dr.flows.failover import failover, outcome_of
from tests.peers import needs

from .conftest import in_thread, wait_until
from .identity_stack import PEOPLE, identity_stack
from .test_identity_proxy import _paused_run, as_worker

CHROMIUM = os.environ.get("LIFEBOAT_CHROMIUM", "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("LIFEBOAT_TEST_ARTIFACTS", ROOT / ".lifeboat/test-artifacts")) / "browser"


def _why_skip() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if shutil.which("haproxy") is None:
        return "no haproxy (apt-get install haproxy)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    return None


pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.timeout(600),
    needs(_why_skip()),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, approval_keys):
    with identity_stack(tmp_path_factory.mktemp("identity"), approval_keys) as s:
        yield s


@pytest.fixture
def runbook(tmp_path, monkeypatch):
    """The pretraining example, with Alice's SSO login mapped to the first on-call."""
    shutil.copytree(ROOT / "runbooks", tmp_path / "runbooks")
    path = tmp_path / "runbooks" / "llama-70b-pretrain.yaml"
    text = path.read_text()
    line = "  approvers: [U01ONCALL01, U01ONCALL02]\n"
    assert line in text
    path.write_text(text.replace(line, line + "  logins: {U01ONCALL01: [alice@example.com]}\n"))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def test_the_on_call_reads_the_card_and_approves_in_the_prefect_ui(stack, runbook):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with as_worker(stack):
        t = in_thread(failover, str(runbook), dry_run=True, approval="wait", return_state=True)
        run_id = wait_until(_paused_run, timeout=300)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        calls: list[tuple[int, str, str]] = []  # every API call the UI made, through the proxy
        page.on(
            "response",
            lambda r: (
                calls.append((r.status, r.request.method, r.url.split("?")[0])) if "/api/" in r.url else None
            ),
        )
        try:
            page.goto(f"{stack.proxy_url}/login?redirect=/runs/flow-run/{run_id}")
            # The Prefect login (the server has an auth string): LOGIN:PASSWORD for the proxy.
            password = page.locator("input[type=password]")
            password.wait_for(timeout=60_000)
            page.screenshot(path=SHOTS / "1-login.png")
            password.fill(f"alice@example.com:{PEOPLE['alice@example.com']}")
            password.press("Enter")
            page.wait_for_url("**/runs/flow-run/**", timeout=60_000)
            page.goto(f"{stack.proxy_url}/runs/flow-run/{run_id}")  # afresh: no toasts from before the login
            page.get_by_text("failover-llama-70b-pretrain-").first.wait_for(timeout=60_000)
            page.get_by_role("button", name="Resume").click()
            dialog = page.get_by_role("dialog")
            for fact in ("Failover approval: llama-70b-pretrain", "Certified checkpoint", "RPO", "/h", "Expected RTO", "Deadline",
                         "Resumes from", "Proof", "On a parity mismatch", "node", "At the deadline", "May decide", "alice@example.com",
                         "You (alice@example.com) may approve or reject"):  # fmt: skip
                expect(dialog.get_by_text(fact).first).to_be_visible(timeout=30_000)
            page.screenshot(path=SHOTS / "2-card.png", full_page=True)
            toggle = dialog.locator(
                "input[type=checkbox]"
            ).first  # the "Approve" switch (a styled, hidden input)
            toggle.evaluate("e => e.click()")
            expect(toggle).to_be_checked()
            dialog.get_by_role("textbox").first.fill("us-east outage confirmed on the provider status page")
            page.screenshot(path=SHOTS / "3-decided.png", full_page=True)
            dialog.get_by_role("button", name="Submit").click()
            t.join(timeout=300)
            page.reload()
            page.get_by_text("Completed").first.wait_for(timeout=60_000)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=SHOTS / "4-completed.png", full_page=True)
            # The timeline picture is on the run's page, not only a file on the worker.
            page.get_by_text("Artifacts", exact=True).first.click()
            page.get_by_text("failover-llama-70b-pretrain", exact=True).first.click()
            picture = page.locator('img[src^="data:image/png;base64,"]').first
            expect(picture).to_be_visible(timeout=30_000)
            assert picture.evaluate("img => img.naturalWidth") > 300
            picture.scroll_into_view_if_needed()
            page.screenshot(path=SHOTS / "5-timeline.png", full_page=True)
        finally:
            page.screenshot(path=SHOTS / "last.png", full_page=True)  # what the browser showed at the end
            browser.close()
            (SHOTS / "api-calls.txt").write_text("".join(f"{s} {m} {u}\n" for s, m, u in sorted(set(calls))))
    # deny by default, yet the on-call's path needed nothing the proxy refuses
    refused = sorted({(s, m, u) for s, m, u in calls if s in (400, 403, 405)})
    assert refused == [], refused

    assert "value" in t.out, t.out.get("error")
    result = outcome_of(t.out["value"])
    assert result["outcome"] == "completed"
    with as_worker(stack), get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(run_id))
    assert run.state.type.value == "COMPLETED" and run.name.startswith("failover-llama-70b-pretrain-")
    assert {"runbook:llama-70b-pretrain", "workload:pretraining", "dry-run"} <= set(run.tags)
