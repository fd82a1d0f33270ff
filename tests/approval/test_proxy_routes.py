"""The identity proxy denies by default: every sensitive route of Prefect's API, however it
is spelled (percent-encoded, double-encoded, `%2F`, `..`, `//`, `.`, case, `;`), and with no,
wrong, a person's or the workers' credentials, never reaches Prefect with Prefect's password.
Real HAProxy with `deploy/haproxy/lifeboat.cfg`, a real Prefect server with its password set,
real objects behind each route (a Secret block, a variable, a paused run, a work pool), so a
request that got through would answer 2xx and show the secret."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
from urllib.parse import urlsplit
from uuid import uuid4

import pytest

from tests.peers import needs

from .identity_stack import PEOPLE, identity_stack

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    needs(None if shutil.which("haproxy") else "no haproxy here (apt-get install haproxy)"),
]

SECRET_VALUE = "s3cr3t-value-nobody-may-read"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, approval_keys):
    with identity_stack(tmp_path_factory.mktemp("routes"), approval_keys) as s:
        yield s


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def send(base: str, method: str, path: str, body: dict | None = None, auth: str | None = None):
    """Exactly `path` on the wire (no client-side normalisation), as an attacker sends it."""
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    headers = {"content-type": "application/json", **({"authorization": auth} if auth else {})}
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def objects(stack):
    """What lies behind each sensitive route, created as a worker (Prefect's own password)."""
    worker = _basic(stack.server_auth)
    api = stack.prefect_url

    def make(method, path, body):
        status, text = send(api, method, path, body, worker)
        assert status < 300, (path, status, text)
        return json.loads(text)

    secret_type = make("GET", "/api/block_types/slug/secret", None)
    schema = make("POST", "/api/block_schemas/filter", {"block_types": {"slug": {"any_": ["secret"]}}})[0]
    block = make(
        "POST",
        "/api/block_documents/",
        {
            "name": "lifeboat-approval-key",
            "data": {"value": SECRET_VALUE},
            "block_type_id": secret_type["id"],
            "block_schema_id": schema["id"],
        },
    )
    make("POST", "/api/variables/", {"name": "leaked_key", "value": SECRET_VALUE})
    make("POST", "/api/work_pools/", {"name": "lifeboat", "type": "process"})
    flow = make("POST", "/api/flows/", {"name": "failover"})
    run = make("POST", "/api/flow_runs/", {"flow_id": flow["id"], "state": {"type": "PAUSED"}})
    return {"block": block["id"], "flow": flow["id"], "run": run["id"]}


def sensitive(o: dict) -> dict[str, tuple[str, str, dict | None]]:
    """Routes no person may reach through the proxy (people decide through lifeboat serve)."""
    resume = {"run_input": {"approved": True, "reason": "go", "approver": "alice@example.com", "via": "ui"}}
    return {
        "read every Secret": ("POST", "/api/block_documents/filter", {"include_secrets": True}),
        "read one Secret": ("GET", f"/api/block_documents/{o['block']}", None),
        "read variables": ("POST", "/api/variables/filter", {}),
        "create a flow run": ("POST", "/api/flow_runs/", {"flow_id": o["flow"]}),
        "read work pools": ("POST", "/api/work_pools/filter", {}),
        "squat the lock": (
            "POST",
            "/api/v2/concurrency_limits/",
            {"name": f"lifeboat-failover-{uuid4().hex[:6]}", "limit": 1, "active_slots": 1},
        ),
        "read deployments": ("POST", "/api/deployments/filter", {}),
        "resume around lifeboat serve": ("POST", f"/api/flow_runs/{o['run']}/resume", resume),
    }


def spellings(path: str) -> dict[str, str]:
    """One route, written every way a decoder downstream might read back as the same route."""
    tail = path.removeprefix("/api/")
    first, _, rest = tail.partition("/")
    return {
        "plain": path,
        "%61 for a": "/%61pi/" + tail,
        "%2F for /": "/api%2F" + tail,
        "%2f lower case": "/api%2f" + tail,
        "double-encoded": "/%2561pi/" + tail,
        "encoded letter mid-route": f"/api/{first[:-1]}%{ord(first[-1]):02X}/{rest}".rstrip("/"),
        "dot-dot": f"/api/flows/../{tail}",
        "dot-dot from outside": f"/x/../api/{tail}",
        "%2e%2e": f"/api/flows/%2e%2e/{tail}",
        "double slashes": f"//api//{tail}",
        "dot segment": f"/api/./{tail}",
        "upper case": "/API/" + tail,
        "mixed case": "/Api/" + tail.title(),
        "matrix parameter": f"/api/{first};x/{rest}".rstrip("/"),
        "backslash": f"/api\\{tail}",
    }


CREDENTIALS = {
    "none": lambda s: None,
    "wrong password": lambda s: _basic("alice@example.com:guess"),
    "a person": lambda s: _basic(f"alice@example.com:{PEOPLE['alice@example.com']}"),
    "the workers' password": lambda s: _basic(s.server_auth),
}


@pytest.mark.parametrize("who", CREDENTIALS)
def test_no_spelling_of_a_sensitive_route_reaches_prefect(stack, objects, who):
    auth = CREDENTIALS[who](stack)
    through = []
    for route, (method, path, body) in sensitive(objects).items():
        for spelling, wire in spellings(path).items():
            if spelling == "plain" and route == "resume around lifeboat serve":
                continue  # the plain resume is lifeboat serve's: test_identity_proxy.py
            status, text = send(stack.proxy_url, method, wire, body, auth)
            if not 400 <= status < 500 or SECRET_VALUE in text:
                through.append(f"{route} as {spelling} ({method} {wire}): {status} {text[:120]}")
    assert through == [], "\n".join(through)


def test_people_still_get_the_ui_and_the_reads_it_needs(stack, objects):
    alice = _basic(f"alice@example.com:{PEOPLE['alice@example.com']}")
    assert send(stack.proxy_url, "GET", "/")[0] == 200  # the UI's page, no login needed
    assert send(stack.proxy_url, "GET", "/ui-settings")[0] == 200  # tells the UI to ask for a login
    assert send(stack.proxy_url, "GET", "/api/health")[0] == 200
    status, text = send(stack.proxy_url, "GET", f"/api/flow_runs/{objects['run']}", None, alice)
    assert status == 200 and json.loads(text)["id"] == objects["run"]
    status, text = send(stack.proxy_url, "POST", "/api/flow_runs/filter", {"limit": 5}, alice)
    assert status == 200 and isinstance(json.loads(text), list)
    assert send(stack.proxy_url, "POST", "/api/flow_runs/filter", {"limit": 5})[0] == 401
    status, text = send(stack.proxy_url, "GET", "/api/admin/settings", None, alice)  # the UI reads it
    assert status == 200 and stack.server_auth not in text  # Prefect obfuscates its secrets
