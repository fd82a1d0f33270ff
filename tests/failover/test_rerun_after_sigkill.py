"""A failover (and a failback) whose worker is SIGKILLed at a step, then re-run under the
same flow-run id, as `lifeboat-failover-rerun` schedules it: the re-run finds the finished
steps finished. Real processes on a real Prefect server: the flow runs in a process of its
own that dies at the chosen point (`tests.failover.crashing_run`), over the sandboxed demo
runbook (local stores, local compute, its trainer resuming for real).

What a re-run must leave, wherever the first attempt died: the checkpoint the run chose
(never one its own resumed job wrote since), one epoch bump, one cluster, the resumed job
not restarted when it runs healthy, parity proven from that checkpoint, outcome completed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.fencing import read_lease
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.resume import parse_loaded
from lifeboat_dr.flows.drills.base import amend
from lifeboat_dr.flows.sandbox import sandbox_images, sandboxed
from lifeboat_dr.flows.wiring import build_steps, cluster_name, failback_cluster, providers_for
from lifeboat_dr.providers.compute.base import JobState
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.runbooks.loader import load_runbook
from tests.flow_run_processes import printed_result

pytestmark = [pytest.mark.integration, pytest.mark.processes, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
LONG_JOB = "--steps 2000 --step-seconds 0.05"  # still training when the re-run looks at it

# Where the first attempt dies: a step's action landed but the walker had not recorded it,
# or its record landed. Each point costs two flow processes (~15 s), so: the checkpoint's
# choice, each step that acts, and the proof. Seven more were tried and pass alike (certify
# and approval landed, fenced recorded, prove landed; a failback's certify landed, fenced and
# first_step recorded); the walker's re-run over scripted steps covers them (test_rerun_walk.py).
FAILOVER_KILLS = (
    "certified:recorded",
    "fence:landed",
    "provision:landed",
    "resume:landed",
    "first_step:recorded",
    "parity_passed:recorded",
)
FAILBACK_KILLS = ("fence:landed", "resume:landed", "parity_passed:recorded")


@pytest.fixture
def world(prefect_server, tmp_path):
    """The sandboxed demo runbook as a file the flows load, with a long-running job."""
    from prefect.settings import PREFECT_API_URL

    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "rerun", root=tmp_path)
    rb = amend(rb, job={"command": rb.job.command.replace("--steps 50", LONG_JOB)})
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(rb.model_dump(mode="json", exclude_none=True)))
    rb._path = path
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_LOCK_LEASE": "3",  # the killed attempt's hold on the lock lapses 3 s after its last renewal
        "PYTHONPATH": str(ROOT),
    }
    compute = LocalCompute(tmp_path / ".lifeboat" / "clusters")  # the flows' compute (runbook dir)
    yield rb, env, compute
    for name in compute.clusters():
        compute.teardown(name)


def new_run(flow, parameters: dict) -> str:
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    with get_client(sync_client=True) as client:
        return str(client.create_flow_run(flow, parameters=parameters, state=Scheduled()).id)


def attempt(world, flow_name: str, run_id: str, point: str | None = None) -> subprocess.CompletedProcess:
    rb, env, _ = world
    args = [sys.executable, "-m", "tests.failover.crashing_run", flow_name, run_id]
    return subprocess.run(
        args + ([point] if point else []),
        cwd=rb.base_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def scheduled_again(rb, run_id: str) -> None:
    """What `lifeboat-failover-rerun` does to a crashed run. The killed attempt's hold on the
    runbook's lock is left as it was: the re-run (same run id) waits out its lease itself."""
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, Scheduled(), force=True)


def result_of(done: subprocess.CompletedProcess) -> dict:
    result = printed_result(done.stdout)
    assert result, f"exit {done.returncode}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return result


def entry_of(world, run_id: str):
    rb, env, _ = world
    entries = [e for e in LedgerFile(env["LIFEBOAT_LEDGER"]).read(rb.name) if e.run_id == run_id]
    return entries[0] if entries else None


def job_of(compute: LocalCompute, cluster: str) -> tuple[int | None, int | None]:
    """(pid, loaded step) of the job on `cluster`, while it runs; (None, None) otherwise."""
    if cluster not in compute.clusters() or compute.status(cluster).job is not JobState.RUNNING:
        return None, None
    pid = json.loads((compute.root / cluster / "state.json").read_text())["pid"]
    loaded = parse_loaded(compute.logs(cluster))
    return pid, loaded[0] if loaded else None


def handed_back(rb, run_id: str) -> int:
    """The step a failback's fence handed back and resumes from, as it keeps it beside the
    primary's lease (`FailbackSteps`)."""
    record = b"".join(open_store(rb.primary.store).read(f"_lifeboat/failback/{run_id}.json"))
    return json.loads(record)["step"]


def step_of(uri: str | None) -> int | None:
    return None if uri is None else int(uri.rstrip("/").rsplit("-", 1)[1])


def crash_and_rerun(world, flow, flow_name: str, parameters: dict, point: str, cluster: str):
    """The first attempt dies at `point`; the re-run under its id goes to the end. Returns
    the run id, the re-run's result, its ledger entry, and what the first attempt left:
    the checkpoint it recorded, and its job (pid, loaded step) on `cluster`."""
    rb, _, compute = world
    run_id = new_run(flow, parameters)
    crashed = attempt(world, flow_name, run_id, point)
    assert crashed.returncode == -9, f"exit {crashed.returncode}: {crashed.stderr[-3000:]}"
    left = entry_of(world, run_id)
    chosen = step_of(left.checkpoint) if left is not None else None
    job = job_of(compute, cluster)
    scheduled_again(rb, run_id)
    result = result_of(attempt(world, flow_name, run_id))  # the job commits on meanwhile
    return run_id, result, entry_of(world, run_id), chosen, job


@pytest.mark.parametrize("point", FAILOVER_KILLS)
def test_a_failover_killed_at_a_step_and_re_run_finds_its_finished_steps_finished(world, point):
    from lifeboat_dr.flows.failover import failover

    rb, _, compute = world
    cluster = cluster_name(rb)
    parameters = {"runbook": str(rb.path), "force": True, "evidence": ["test: outage"], "approval": "approve"}
    run_id, result, entry, chosen, (pid, loaded) = crash_and_rerun(
        world, failover, "failover", parameters, point, cluster
    )

    assert result["outcome"] == "completed", (result, entry.failures, entry.notes)
    assert "parity_passed" in entry.phases and "within" in entry.notes["parity"], entry.notes
    resumed = step_of(entry.checkpoint)
    assert resumed == 40, "the newest certified before the outage, never the resumed job's own"
    assert chosen in (None, resumed), "the checkpoint the first attempt chose"
    for store in (rb.secondary.store, rb.primary.store):
        lease, _ = read_lease(open_store(store))
        assert (lease.epoch, lease.run_id) == (1, run_id), "fenced once, by this run"
    assert compute.clusters() == [cluster]
    now_pid, now_loaded = job_of(compute, cluster)
    assert now_loaded == resumed, "the job runs from the chosen checkpoint"
    if pid is not None:
        assert now_pid == pid, "the healthy job the first attempt resumed was not restarted"
        assert newest(rb.secondary.store) > resumed, "its own newer checkpoints were there to take"


def newest(store_uri: str) -> int:
    return max(int(p.name.rsplit("-", 1)[1]) for p in Path(store_uri.removeprefix("file://")).glob("step-*"))


@pytest.fixture
def failed_over(world):
    """The demo runbook failed over for real: its job trains on the secondary (`demo-dr`)
    and has committed checkpoints of its own."""
    rb, _, compute = world
    providers = providers_for(rb, registry=FakeRegistry(sandbox_images(rb)))
    providers.compute = compute
    over = build_steps(rb, run_id="over", providers=providers, evidence=["test: outage"])
    over.confirm()
    checkpoint = over.certify()
    over.fence()
    over.resume(over.provision(over.plan()), checkpoint)
    time.sleep(0.6)  # a checkpoint every 5 steps of 50 ms
    return world


@pytest.mark.parametrize("point", FAILBACK_KILLS)
def test_a_failback_killed_at_a_step_and_re_run_finds_its_finished_steps_finished(failed_over, point):
    from lifeboat_dr.flows.failback import failback

    rb, _, compute = failed_over
    home = failback_cluster(rb)
    parameters = {"runbook": str(rb.path), "approval": "approve"}
    run_id, result, entry, chosen, (pid, loaded) = crash_and_rerun(
        failed_over, failback, "failback", parameters, point, home
    )

    assert result["outcome"] == "completed", (result, entry.failures, entry.notes)
    assert "parity_passed" in entry.phases and "within" in entry.notes["parity"], entry.notes
    resumed = step_of(entry.checkpoint)
    assert resumed == handed_back(rb, run_id), "the newest the standby's job committed before its fence"
    if point not in ("certify:landed", "fence:landed"):  # the fence's hand-back was recorded
        assert chosen == resumed, "the checkpoint the first attempt chose"
    for store in (rb.secondary.store, rb.primary.store):
        lease, _ = read_lease(open_store(store))
        assert (lease.epoch, lease.run_id) == (2, run_id), "fenced once, by this run"
    assert compute.clusters() == [home], "the standby's cluster stopped, one on the primary"
    now_pid, now_loaded = job_of(compute, home)
    assert now_loaded == resumed, "the job runs from the chosen checkpoint"
    if pid is not None:
        assert now_pid == pid, "the healthy job the first attempt resumed was not restarted"
