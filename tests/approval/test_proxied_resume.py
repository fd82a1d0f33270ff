"""lifeboat serve's routes for the identity proxy, with hostile requests (no Prefect: a
recording resume and cancel stand in; the real path is in test_identity_proxy.py)."""

from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from lifeboat_dr.core.approval_keys import public_keys
from lifeboat_dr.core.approval_proof import Ask, verdict_key, verify_signed
from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable
from lifeboat_dr.shell.approvals import ProxySettings, approval_routes
from lifeboat_dr.shell.server import create_app

RUN = "8d4c1a52-0000-4000-8000-000000000001"
SECRET = "proxy-secret"
PROXY = {"x-lifeboat-proxy-secret": SECRET, "x-lifeboat-user": "alice@example.com"}
GOOD = {"run_input": {"approved": True, "reason": "region down"}}
CANCEL = {"state": {"type": "CANCELLING", "name": "Cancelling"}, "force": True}


def ask_of(run_id):
    if run_id.endswith("409"):
        return None  # not a Lifeboat gate
    if run_id.endswith("999"):
        return {"run_id": RUN, "runbook": "llama-pretrain", "action": "failover", "epoch": 4}
    if run_id.endswith("f1ee7"):  # a fleet's gate: the placed jobs may be decided one by one
        return {"run_id": run_id, "runbook": "fleet-0123456789abcdef", "action": "failover", "epoch": None,
                "jobs": ["pretrain-a", "pretrain-b"]}  # fmt: skip
    return {"run_id": run_id, "runbook": "llama-pretrain", "action": "failback", "epoch": 4}


@pytest.fixture
def route(approval_keys):
    calls = []

    async def resume(run_id, run_input):
        calls.append(("resume", run_id, run_input))
        if run_id.endswith("404"):
            raise NotFound("no flow run")
        if run_id.endswith("502"):
            raise ProviderUnavailable("Prefect API: ConnectError")
        return 201, {"status": "ACCEPT"}

    async def cancel(run_id, message):
        calls.append(("cancel", run_id, message))
        return 201, {"status": "ACCEPT"}

    settings = ProxySettings(proxy_secret=SECRET, max_body=4096)
    routes = approval_routes(settings, approval_keys.signing, resume=resume, cancel=cancel, ask=ask_of)
    client = TestClient(create_app(routes), raise_server_exceptions=False)
    client.calls = calls
    return client


def test_a_proxied_decision_is_signed_for_the_runs_ask_and_relays_prefects_answer(route):
    r = route.post(f"/api/flow_runs/{RUN}/resume", json=GOOD, headers=PROXY | {"user-agent": "prefect/3.9.1"})
    assert r.status_code == 201 and r.json() == {"status": "ACCEPT"}
    ((_, run_id, run_input),) = route.calls
    d = verify_signed(public_keys(), Ask(RUN, "llama-pretrain", "failback", 4), run_input, datetime.now(UTC))
    assert (d.approver, d.via, d.approved, d.reason) == ("alice@example.com", "cli", True, "region down")
    assert r.headers["x-lifeboat-verdict-key"] == verdict_key(run_input)  # where the run will answer


@pytest.mark.parametrize(
    "headers",
    [{}, {"x-lifeboat-user": "alice@example.com"}, PROXY | {"x-lifeboat-proxy-secret": "guess"},
     PROXY | {"x-lifeboat-user": ""}, PROXY | {"x-lifeboat-user": "a" * 300}],
    ids=["nothing", "user-without-secret", "wrong-secret", "empty-user", "huge-user"],
)  # fmt: skip
@pytest.mark.parametrize("path,body", [("resume", GOOD), ("set_state", CANCEL)])
def test_without_the_proxys_secret_and_a_login_nothing_happens(route, headers, path, body):
    r = route.post(f"/api/flow_runs/{RUN}/{path}", json=body, headers=headers)
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
        (b'{"run_input": {"approved": true, "reason": "r", "jobs": "pretrain-a"}}', 400),
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
        "jobs-not-a-list",
        "no-input",
    ],
)
def test_hostile_bodies_get_a_4xx_and_resume_nothing(route, body, status):
    r = route.post(f"/api/flow_runs/{RUN}/resume", content=body, headers=PROXY)
    assert r.status_code == status and route.calls == []


def test_deep_nesting_within_the_size_cap_is_a_400(route):
    body = b'{"run_input": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    assert route.post(f"/api/flow_runs/{RUN}/resume", content=body, headers=PROXY).status_code == 400


def test_not_a_run_id_no_such_run_not_a_gate_or_prefect_down(route):
    assert route.post("/api/flow_runs/not-a-uuid/resume", json=GOOD, headers=PROXY).status_code == 400
    missing = "8d4c1a52-0000-4000-8000-000000000404"
    assert route.post(f"/api/flow_runs/{missing}/resume", json=GOOD, headers=PROXY).status_code == 404
    down = "8d4c1a52-0000-4000-8000-000000000502"
    assert route.post(f"/api/flow_runs/{down}/resume", json=GOOD, headers=PROXY).status_code == 502
    for not_a_gate in ("8d4c1a52-0000-4000-8000-000000000409", "8d4c1a52-0000-4000-8000-000000000999"):
        r = route.post(f"/api/flow_runs/{not_a_gate}/resume", json=GOOD, headers=PROXY)
        assert r.status_code == 409, r.text  # asks nothing, or publishes another run's ask: nothing signed
    assert [c[1] for c in route.calls] == [missing, down]


def test_a_person_may_cancel_but_set_no_other_state(route):
    r = route.post(f"/api/flow_runs/{RUN}/set_state", json=CANCEL, headers=PROXY)
    assert r.status_code == 201
    assert route.calls == [("cancel", RUN, "cancelled by alice@example.com through the identity proxy")]
    route.calls.clear()
    for kind in ("RUNNING", "COMPLETED", "SCHEDULED", "PAUSED", "FAILED", None):
        body = {"state": {"type": kind}, "force": True}
        r = route.post(f"/api/flow_runs/{RUN}/set_state", json=body, headers=PROXY)
        assert r.status_code == 403, kind
    assert route.calls == []


def test_the_fleet_forms_jobs_are_signed_with_the_decision(route):
    fleet = "8d4c1a52-0000-4000-8000-0000000f1ee7"
    body = {"run_input": {"approved": True, "reason": "a first", "jobs": ["pretrain-a"]}}
    assert route.post(f"/api/flow_runs/{fleet}/resume", json=body, headers=PROXY).status_code == 201
    ((_, _, run_input),) = route.calls
    ask = Ask(fleet, "fleet-0123456789abcdef", "failover", None, jobs=("pretrain-a", "pretrain-b"))
    d = verify_signed(public_keys(), ask, run_input, datetime.now(UTC))
    assert (d.approver, d.via, d.jobs) == ("alice@example.com", "ui", ["pretrain-a"])
