"""On a real Prefect server: prefect.yaml's `recover` automation, from the training guard's
fault events to runs of the real `recover` deployment, and those runs walked by child
processes over the demo's stand-in trainer (local compute, file:// stores, the ledger file).

Twice (the same event delivered twice; two events for one fault, from two ranks or the
watch), forged (no runbook on the event, or one not deployed) and half-done (a walk whose
process died after it restarted the job) each act at most once on the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.detection.events import xid_fault_events
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.core.guard.faults import Fault
from lifeboat_dr.core.guard.loop import EVENT, fault_resource
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.automation import recover_triggers
from lifeboat_dr.flows.deploy import runbook_target
from lifeboat_dr.providers.orchestrator.prefect_api import drain_events, emit, emit_spec
from tests.flow_run_processes import printed_result
from tests.runbook_yaml import two_site_runbook

ROOT = Path(__file__).resolve().parents[2]
TRAIN = "python -m lifeboat_dr.standins.trainer --steps 4000 --every 5 --step-seconds 0.02"

pytestmark = pytest.mark.integration


def deploy(path: Path):
    from prefect.events.worker import EventsWorker

    from lifeboat_dr.flows.recovery import recover

    EventsWorker.drain_all()
    target = runbook_target(path, ROOT)
    return recover.to_deployment(
        name=target.name, parameters={"runbook": target.path}, triggers=recover_triggers(target)
    ).apply()


def guard_event(
    job: str, rank: int, step: int, runbook: str = "", path: str = "", *, event_id: str = "", **payload
) -> str:
    """The event a guarded rank sends (`TrainingGuard._emit`'s resource), sent; its id."""
    fault = Fault("hang", rank, "node-1", step, f"step {step} ran 9.00 s, past the bound 2.00 s")
    event_id = event_id or str(uuid.uuid4())
    body = {"kind": "hang", "rank": rank, "host": "node-1", "step": step, "detail": fault.detail}
    emit(EVENT, fault_resource(job, fault, runbook, path), body | payload, id=uuid.UUID(event_id))
    drain_events(10)  # sent: Prefect's client drops a second event of one id still queued beside it
    return event_id


def runs_of(deployment_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )


def until_runs(deployment_id, n: int, timeout: float = 60.0) -> list:
    drain_events(10)
    deadline = time.monotonic() + timeout
    while len(runs := runs_of(deployment_id)) < n:
        assert time.monotonic() < deadline, f"{len(runs)} of {n} runs after {timeout:g}s"
        time.sleep(0.2)
    time.sleep(3)  # anything more the automation would start has started by now
    return runs_of(deployment_id)


def test_only_a_fault_naming_a_deployed_runbook_starts_recover_once_per_event(prefect_server, tmp_path):
    path = tmp_path / "laddered.yaml"
    ladder = {"rungs": [{"rung": "restart"}, {"rung": "failover"}]}
    path.write_text(
        two_site_runbook("laddered", primary={"store": "file://primary", "cluster": "train"}, recovery=ladder)
    )
    deployment = deploy(path)
    occurred = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)

    guard_event("by-hand", 0, 40)  # a job started without Lifeboat: nothing to recover automatically
    guard_event("elsewhere", 0, 40, runbook="not-deployed", path=str(path))  # forged: no such deployment
    rank0 = guard_event("llama", 0, 41, runbook="laddered", path="/srv/rb/laddered.yaml", last_committed=40)
    guard_event("llama", 0, 41, runbook="laddered", event_id=rank0)  # delivered again (a retry, a relay)
    rank1 = guard_event("llama", 1, 41, runbook="laddered", path="/srv/rb/laddered.yaml")
    reading = Reading("gpu_health", "nvml@node-1", Status.failing, occurred, "XID 79", {"xids": [(1, 79)]})
    (xid,) = xid_fault_events([reading], "laddered", "runbooks/laddered.yaml")
    emit_spec(xid)

    runs = until_runs(deployment, 3)

    assert sorted(r.parameters["event_id"] for r in runs) == sorted([rank0, rank1, str(xid.id)])
    by_event = {r.parameters["event_id"]: r for r in runs}
    first = by_event[rank0].parameters
    # the runbook is the deployment's own, whatever path the event carries
    assert {r.parameters["runbook"] for r in runs} == {str(path.resolve())}
    assert first["fault"]["step"] == 41 and first["fault"]["last_committed"] == 40
    assert by_event[str(xid.id)].parameters["fault"]["xid"] == 79
    assert datetime.fromisoformat(str(by_event[str(xid.id)].parameters["occurred"])) == occurred
    assert all(r.state.type.value == "SCHEDULED" for r in runs)


# -- walked by child processes over the stand-in trainer ------------------------------------


@pytest.fixture
def world(prefect_server, tmp_path):
    from prefect.settings import PREFECT_API_URL

    from lifeboat_dr.providers.compute.local import LocalCompute

    doc = yaml.safe_load((ROOT / "runbooks" / "demo.yaml").read_text())
    doc["name"] = f"ladder-{uuid.uuid4().hex[:6]}"  # its own automation on the session's server
    doc["primary"]["cluster"] = "demo-primary"
    doc["job"]["command"] = TRAIN
    doc["recovery"] = {"rungs": [{"rung": "restart", "rto": "60s"}]}
    (tmp_path / "rb").mkdir()
    path = tmp_path / "rb" / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_LOCK_LEASE": "3",  # a killed walk's hold on the recovery lock lapses 3 s after its last renewal
        "PYTHONPATH": str(ROOT),
    }
    compute = LocalCompute(tmp_path / "rb" / ".lifeboat" / "clusters")
    yield path, env, compute, deploy(path)
    for name in compute.clusters():
        compute.teardown(name)


def killed_job(path: Path, compute) -> int:
    """The runbook's job launched as Lifeboat launches it, killed once it committed twice (as
    the guard's exit ends it); the newest committed step."""
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.flows.recovery import newest_committed, primary_job
    from lifeboat_dr.flows.wiring import open_site
    from lifeboat_dr.providers.compute.base import JobState, PlanOption
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(path)
    home = rb.store_uri(rb.primary.store)
    job = primary_job(rb, home)
    assert job.env["LIFEBOAT_RUNBOOK_NAME"] == rb.name  # what the guard's event will name
    compute.launch("demo-primary", PlanOption("local", None, None, False, None), job)
    deadline = time.monotonic() + 60
    while len(committed_checkpoints(open_site(rb, rb.primary), "manifest")) < 2:
        assert time.monotonic() < deadline, "the job did not commit twice"
        time.sleep(0.1)
    os.killpg(compute._state("demo-primary")["pid"], signal.SIGKILL)
    while compute.status("demo-primary").job is not JobState.FAILED:
        assert time.monotonic() < deadline + 10, "the killed job was not seen failed"
        time.sleep(0.1)
    return newest_committed(rb)[1]


def walk(env, run_id: str, point: str | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "tests.failover.crashing_run", "recover", str(run_id)]
    return subprocess.Popen(
        args + ([point] if point else []),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def result_of(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=240)
    result = printed_result(out)
    assert result, f"exit {proc.returncode}: {out[-4000:]}"
    return result


def restarts(env, runbook: str) -> list[str]:
    """The ladder rung entries whose action was issued (`provisioned`): each one a restart."""
    entries = LedgerFile(env["LIFEBOAT_LEDGER"]).read(runbook)
    return [e.run_id for e in entries if e.kind == "restart" and "provisioned" in e.phases]


@pytest.mark.processes
def test_two_ranks_reporting_one_fault_and_a_redelivery_restart_the_job_once(world):
    from lifeboat_dr.providers.compute.base import JobState

    path, env, compute, deployment = world
    name = yaml.safe_load(path.read_text())["name"]
    step = killed_job(path, compute)
    rank0 = guard_event("demo", 0, step + 3, runbook=name, path=str(path))
    guard_event("demo", 0, step + 3, runbook=name, event_id=rank0)  # delivered again
    rank1 = guard_event("demo", 1, step + 3, runbook=name, path=str(path))  # no agreement: each rank speaks
    runs = until_runs(deployment, 2)
    assert sorted(r.parameters["event_id"] for r in runs) == sorted([rank0, rank1])

    walks = [walk(env, r.id) for r in runs]  # two workers pick both up at once
    results = sorted((result_of(w) for w in walks), key=lambda r: r["outcome"])

    assert [r["outcome"] for r in results] == ["completed", "stood-down"], results
    assert results[0]["recovered_by"] == "restart"
    assert len(restarts(env, name)) == 1  # one walk acted: the other stood down (the lock, or the live job)
    assert compute.status("demo-primary").job is JobState.RUNNING


@pytest.mark.processes
@pytest.mark.parametrize("point", ["act:landed", "provisioned:recorded"])
def test_a_walk_that_died_after_its_restart_is_walked_again_without_restarting_the_job(world, point):
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from lifeboat_dr.providers.compute.base import JobState

    path, env, compute, deployment = world
    name = yaml.safe_load(path.read_text())["name"]
    step = killed_job(path, compute)
    event = guard_event("demo", 0, step + 3, runbook=name, path=str(path))
    (run,) = until_runs(deployment, 1)

    died = walk(env, run.id, point)  # SIGKILLed right after the restart was issued / recorded
    died.communicate(timeout=240)
    assert died.returncode == -signal.SIGKILL
    assert compute.status("demo-primary").job is JobState.RUNNING
    started = compute._state("demo-primary")["started_at"]
    with get_client(sync_client=True) as client:  # as a crashed run is scheduled again
        client.set_flow_run_state(run.id, Scheduled(), force=True)

    again = result_of(walk(env, run.id))

    # restart issued, not recorded: the job runs, so the rung stands down (a live job is never touched);
    # recorded: the re-run only waits for the job's health again
    want = "stood-down" if point == "act:landed" else "completed"
    assert (again["run_id"], again["outcome"]) == (f"recovery-{event}", want)
    assert compute._state("demo-primary")["started_at"] == started  # not restarted again
    assert compute.status("demo-primary").job is JobState.RUNNING
