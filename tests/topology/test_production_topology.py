"""The production topology, for real: Prefect as its scaling guide runs it (two API servers on
PostgreSQL with Redis messaging, behind HAProxy's deploy/haproxy/prefect-api.cfg, and one
background-services process), two process workers and two `lifeboat serve` replicas sharing
their state through a store, everything talking to Prefect through the balancer.

An API server is killed (SIGKILL, as its host dies) between the two alert groups, in the
middle of a failover, and while a failover waits for approval: the automation still fires
once, the failover completes on its first attempt, and the approval lands through the identity
proxy and the other server. A serve replica is killed: alerts still reach a failover through
the other. The worker running a failover is killed: the run is marked Crashed (no heartbeat),
scheduled again, and the other worker finishes it under the same run id; the ledger says it
was a re-run."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from lifeboat_dr.testing.prefect_servers import HaControlPlane, Process, free_port
from tests.alertmanager_webhooks import alerting_runbook, two_sources
from tests.flow_run_processes import flow_run_process, kill_flow_runs_on
from tests.peers import missing, needs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOKEN = "topology-token"
ONCALL = ("oncall", "oncall-pw")  # runbooks/demo.yaml's approver login, in the identity proxy's userlist

pytestmark = [
    pytest.mark.timeout(900),
    needs(None if shutil.which("haproxy") else "no haproxy here (apt-get install haproxy)"),
]


@dataclass
class Site:
    api: HaControlPlane
    env: dict[str, str]
    alerted: Path  # the runbook the serve replicas guard
    workers: list[Process]
    replicas: list[Process]
    ports: list[int]
    proxy_url: str  # the identity proxy: where a person's `lifeboat approve` goes
    ledger: Path


@pytest.fixture(scope="module")
def control_plane(postgres_url, tmp_path_factory):
    from lifeboat_dr.testing.prefect_servers import RedisMissing, ha_control_plane, redis_server

    try:
        redis = redis_server()
        redis_url = redis.__enter__()
    except RedisMissing as e:
        missing(f"no Redis here: {e}")
    try:
        folder = tmp_path_factory.mktemp("control-plane")
        started = time.monotonic()
        with ha_control_plane(
            postgres_url,
            redis_url,
            ROOT / "deploy/haproxy/prefect-api.cfg",
            folder,
            PREFECT_SERVER_UI_ENABLED="false",  # the API is what is under test; the UI costs each start
        ) as plane:
            print(f"control plane up: {time.monotonic() - started:.1f}s")
            yield plane
    finally:
        redis.__exit__(None, None, None)


def _spawn(name: str, args: list[str], env: dict, log: Path) -> Process:
    proc = Process(name, args, {**env}, log)
    proc.start()
    return proc


@contextlib.contextmanager
def _identity_proxy(folder: Path, prefect_addr: str, serve_port: int, proxy_secret: str):
    """HAProxy with deploy/haproxy/lifeboat.cfg: people in, Prefect (the balancer) and the
    decision routes of `lifeboat serve` behind."""
    users = folder / "users.cfg"
    users.write_text(f"userlist people\n    user {ONCALL[0]} insecure-password {ONCALL[1]}\n")
    port = free_port()
    proxy = _spawn(
        "identity-proxy",
        [shutil.which("haproxy"), "-db", "-f", str(users), "-f", str(ROOT / "deploy/haproxy/lifeboat.cfg")],
        {
            **os.environ,
            "LISTEN_ADDR": f"127.0.0.1:{port}",
            "PREFECT_ADDR": prefect_addr,
            "PREFECT_SERVER_BASIC": base64.b64encode(b"unused:unused").decode(),
            "LIFEBOAT_ADDR": f"127.0.0.1:{serve_port}",
            "LIFEBOAT_PROXY_SECRET": proxy_secret,
        },
        folder / "identity-proxy.log",
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/health", 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        proxy.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def site(control_plane, tmp_path_factory):
    """`lifeboat deploy` against the balancer, two workers and two `lifeboat serve` replicas
    (which also sign decisions for the identity proxy in front of them)."""
    from lifeboat_dr.core.approval_keys import generate, public_text

    tmp = tmp_path_factory.mktemp("site")
    proxy_secret = secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": control_plane.url,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",  # as `lifeboat deploy` says to start workers
        "LIFEBOAT_STATE_DIR": f"file://{tmp}/shared-state",
        "LIFEBOAT_LEDGER": str(tmp / "ledger.jsonl"),
        "LIFEBOAT_ALERTMANAGER_TOKEN": TOKEN,
        "LIFEBOAT_PROXY_SECRET": proxy_secret,
        # serve signs decisions with the private key; the workers' flows verify with the public
        "LIFEBOAT_APPROVAL_SIGNING_KEY_FILE": str(tmp / "approval-signing.pem"),
        "LIFEBOAT_APPROVAL_PUBLIC_KEYS": public_text(generate(tmp / "approval-signing.pem")),
    }
    deploy = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "deploy", "runbooks/demo.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-2000:]
    prefect = str(BIN / "prefect")
    workers = [
        _spawn(
            f"w{i}",
            [prefect, "worker", "start", "--pool", "lifeboat", "--name", f"w{i}"],
            env,
            tmp / f"w{i}.log",
        )
        for i in (1, 2)
    ]
    alerted = alerting_runbook(tmp, "alerted")
    ports = [free_port(), free_port()]
    replicas = [
        _spawn(
            f"serve{p}",
            [sys.executable, "-m", "lifeboat_dr", "serve", str(alerted), "--port", str(p)],
            env,
            tmp / f"serve{p}.log",
        )
        for p in ports
    ]
    try:
        for p in ports:
            _wait_http(f"http://127.0.0.1:{p}/healthz")
        balancer = control_plane.url.removeprefix("http://").removesuffix("/api")
        with _identity_proxy(tmp, balancer, ports[1], proxy_secret) as proxy_url:
            yield Site(control_plane, env, alerted, workers, replicas, ports, proxy_url, tmp / "ledger.jsonl")
    finally:
        for p in replicas + workers:
            p.kill()
        kill_flow_runs_on(control_plane.url)  # the cancelled alert-path run, in a session of its own


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{url} did not come up")
            time.sleep(0.3)


def _post(port: int, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/alerts/alertmanager",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return out


def _runs_of(client, deployment_id):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    )


def _until(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f}s")


@contextlib.contextmanager
def _client(url: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        yield client


def _ledger_entry(site: Site, run_id) -> object | None:
    from lifeboat_dr.core.ledger import LedgerFile

    mine = [e for e in LedgerFile(site.ledger).read("demo") if e.run_id == str(run_id)]
    return mine[0] if mine else None


def _final(client, run_id, timeout: float):
    return _until(
        f"flow run {run_id} to a final state",
        lambda: (
            (r := client.read_flow_run(run_id)).state.is_final() and r.state.type.value != "CRASHED" and r
        ),
        timeout,
        every=1,
    )


def test_alerts_confirm_once_through_an_api_server_and_a_serve_replica_dying(site):
    from prefect.states import Cancelled

    alerted = str(site.alerted)
    with _client(site.api.url) as client:
        failover = client.read_deployment_by_name("failover/failover")

        # Between the two alert groups one serve replica dies, and one API server: the other
        # replica, reading the shared state, sees the first group's vote and confirms through
        # the other API server; the automation (in the services process) starts one failover.
        first_group, second_group = two_sources("alerted")
        assert _post(site.ports[0], first_group)["events"] >= 1
        site.replicas[0].kill()
        site.api.api[0].kill()
        killed_at = time.monotonic()
        second = _post(site.ports[1], second_group)
        assert second["runbooks"]["alerted"].startswith("confirmed: 2 of 2"), second

        def alerted_runs():
            return [r for r in _runs_of(client, failover.id) if r.parameters.get("runbook") == alerted]

        runs = _until("a failover run for the alerted runbook", alerted_runs, 180)
        print(f"API server killed -> failover run created: {time.monotonic() - killed_at:.1f}s")
        time.sleep(5)  # a second firing of the automation would show by now
        assert len(alerted_runs()) == 1, "one outage, one failover run"
        client.set_flow_run_state(
            runs[0].id, Cancelled(message="topology test: alert path proven"), force=True
        )
    site.api.restart(site.api.api[0])


def test_a_failover_completes_on_its_first_attempt_when_an_api_server_dies_mid_way(site):
    with _client(site.api.url) as client:
        failover = client.read_deployment_by_name("failover/failover")
        run = client.create_flow_run_from_deployment(
            failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True}
        )
        _until(
            "the failover reaching `fenced`",
            lambda: (e := _ledger_entry(site, run.id)) and e.phases.get("fenced"),
            120,
            every=0.2,
        )
        victim = site.api.api[1]
        victim.kill()
        killed_at = time.monotonic()
        final = _final(client, run.id, 180)
        states = [s.type.value for s in client.read_flow_run_states(run.id)]
        print(f"API server killed at `fenced` -> completed: {time.monotonic() - killed_at:.1f}s; {states}")
        assert final.state.is_completed(), (final.state.message, states)
        assert "CRASHED" not in states and final.run_count == 1, states
        assert _ledger_entry(site, run.id).outcome == "completed"
    site.api.restart(victim)


def _form_shown(client, run_id) -> bool:
    """Paused, and the approval form's schema saved (Prefect saves it just after pausing; a
    resume before that is refused: "Run input schema not found")."""
    state = client.read_flow_run(run_id).state
    if not state.is_paused():
        return False
    import httpx

    try:
        client.read_flow_run_input(run_id, state.state_details.run_input_keyset["schema"])
    except httpx.HTTPStatusError as e:
        if e.response.status_code == 404:  # not saved yet
            return False
        raise
    return True


def test_an_approval_lands_through_the_other_api_server_while_the_failover_waits(site, capsys):
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from lifeboat_dr.shell.cli import main as lifeboat

    with _client(site.api.url) as client:
        failover = client.read_deployment_by_name("failover/failover")
        run = client.create_flow_run_from_deployment(
            failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True, "approval": "wait"}
        )
        _until("the failover paused for approval, its form saved", lambda: _form_shown(client, run.id), 120)
        site.api.api[0].kill()
        person = {PREFECT_API_URL: f"{site.proxy_url}/api", PREFECT_API_AUTH_STRING: ":".join(ONCALL)}
        with temporary_settings(updates=person):
            assert lifeboat(["approve", str(run.id), "--reason", "primary confirmed down"]) == 0
        assert "accepted your decision to approve" in capsys.readouterr().out
        final = _final(client, run.id, 180)
        assert final.state.is_completed(), final.state.message
        entry = _ledger_entry(site, run.id)
        assert entry.outcome == "completed" and entry.phases.get("approval_granted")
    site.api.restart(site.api.api[0])


def test_the_worker_running_a_failover_dies_and_the_other_worker_finishes_it(site):
    with _client(site.api.url) as client:
        failover = client.read_deployment_by_name("failover/failover")
        # A dry-run failover; the worker running it dies (with the run's process) mid-way.
        run = client.create_flow_run_from_deployment(
            failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True}
        )
        _until(
            "the failover reaching `fenced`",
            lambda: (e := _ledger_entry(site, run.id)) and e.phases.get("fenced"),
            120,
            every=0.2,
        )
        pid = flow_run_process(str(run.id))
        assert pid is not None, f"no process runs flow run {run.id}"
        victim = next(w for w in site.workers if w.alive and w.proc.pid in _ancestors(pid))
        os.kill(pid, signal.SIGKILL)  # the host dies: the worker and the run's process with it
        victim.kill()
        killed_at = time.monotonic()

        final = _final(client, run.id, 300)
        history = client.read_flow_run_states(run.id)
        states = [s.type.value for s in history]
        crash = next((s for s in history if s.type.value == "CRASHED"), None)
        assert crash is not None and "no heartbeat" in (crash.message or ""), states
        print(f"killed -> completed: {time.monotonic() - killed_at:.1f}s; states {states}")
        assert final.state.is_completed(), (final.state.message, states)
        assert final.run_count >= 2
        entry = _ledger_entry(site, run.id)
        assert entry.outcome == "completed"
        assert "re-run" in entry.notes and "worker was lost" in entry.notes["re-run"]
