"""lifeboat serve's resume route for the identity proxy, with hostile requests (no Prefect:
a recording resume stands in; the real path is in test_identity_proxy.py)."""

from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from lifeboat_dr.core.approval_proof import verify_signed
from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable
from lifeboat_dr.shell.approvals import ProxySettings, approval_routes
from lifeboat_dr.shell.server import create_app

from .conftest import APPROVAL_KEY

RUN = "8d4c1a52-0000-4000-8000-000000000001"
SECRET = "proxy-secret"
PROXY = {"x-lifeboat-proxy-secret": SECRET, "x-lifeboat-user": "alice@example.com"}
GOOD = {"run_input": {"approved": True, "reason": "region down"}}


@pytest.fixture
def route():
    calls = []

    async def resume(run_id, run_input):
        calls.append((run_id, run_input))
        if run_id.endswith("404"):
            raise NotFound("no flow run")
        if run_id.endswith("502"):
            raise ProviderUnavailable("Prefect API: ConnectError")
        return 201, {"status": "ACCEPT"}

    settings = ProxySettings(proxy_secret=SECRET, approval_key=APPROVAL_KEY, max_body=4096)
    client = TestClient(create_app(approval_routes(settings, resume=resume)), raise_server_exceptions=False)
    client.calls = calls
    return client


def test_a_proxied_decision_is_signed_with_the_verified_login_and_relays_prefects_answer(route):
    r = route.post(f"/api/flow_runs/{RUN}/resume", json=GOOD, headers=PROXY | {"user-agent": "prefect/3.9.1"})
    assert r.status_code == 201 and r.json() == {"status": "ACCEPT"}
    ((run_id, run_input),) = route.calls
    d = verify_signed(APPROVAL_KEY.encode(), RUN, run_input, datetime.now(UTC))
    assert (d.approver, d.via, d.approved, d.reason) == ("alice@example.com", "cli", True, "region down")


@pytest.mark.parametrize(
    "headers",
    [{}, {"x-lifeboat-user": "alice@example.com"}, PROXY | {"x-lifeboat-proxy-secret": "guess"},
     PROXY | {"x-lifeboat-user": ""}, PROXY | {"x-lifeboat-user": "a" * 300}],
    ids=["nothing", "user-without-secret", "wrong-secret", "empty-user", "huge-user"],
)  # fmt: skip
def test_without_the_proxys_secret_and_a_login_nothing_is_resumed(route, headers):
    r = route.post(f"/api/flow_runs/{RUN}/resume", json=GOOD, headers=headers)
    assert r.status_code == 401 and route.calls == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"x" * 5000, 413),
        (b"\xff\xfe not utf-8", 400),
        (b"{not json", 400),
        (b"[" * 50_000 + b"]" * 50_000, 413),
        (b'{"run_input": {"approved": "yes", "reason": "r"}}', 400),
        (b'{"run_input": {"approved": true, "reason": "   "}}', 400),
        (b'{"run_input": [1, 2]}', 400),
        (b'{"other": 1}', 400),
    ],
    ids=[
        "too-big",
        "bad-utf8",
        "not-json",
        "deep-nesting",
        "approved-not-bool",
        "blank-reason",
        "list",
        "no-input",
    ],
)
def test_hostile_bodies_get_a_4xx_and_resume_nothing(route, body, status):
    r = route.post(f"/api/flow_runs/{RUN}/resume", content=body, headers=PROXY)
    assert r.status_code == status and route.calls == []


def test_deep_nesting_within_the_size_cap_is_a_400(route):
    body = b'{"run_input": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    assert route.post(f"/api/flow_runs/{RUN}/resume", content=body, headers=PROXY).status_code == 400


def test_not_a_run_id_no_such_run_or_prefect_down(route):
    assert route.post("/api/flow_runs/not-a-uuid/resume", json=GOOD, headers=PROXY).status_code == 400
    missing = "8d4c1a52-0000-4000-8000-000000000404"
    assert route.post(f"/api/flow_runs/{missing}/resume", json=GOOD, headers=PROXY).status_code == 404
    down = "8d4c1a52-0000-4000-8000-000000000502"
    assert route.post(f"/api/flow_runs/{down}/resume", json=GOOD, headers=PROXY).status_code == 502
