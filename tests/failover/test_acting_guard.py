"""One guard for every flow that acts (#26): whoever can start a flow run chooses its
parameters, so a parameter is never a person's approval outside a sandbox, a drill runs only
from the drill flow, and the serving path confirms the outage by the quorum as training does.
Each attack is a real flow on a real Prefect server over real stores (and, for serving, real
toy model servers behind a real HAProxy on loopback)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.fencing import fence_job, read_lease
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.drills.base import amend
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.runbooks.loader import load_runbook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
TASK = "resources:\n  accelerators: H100:8\nrun: python -m train --resume $LIFEBOAT_RESUME_FROM\n"


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(path))
    monkeypatch.chdir(tmp_path)
    return LedgerFile(path)


def cloud_runbook(tmp_path, name: str) -> Path:
    """A training runbook whose job runs on GPUs in the cloud (SkyPilot), its stores played
    with real history: not a sandbox, whatever its stores."""
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), name, root=tmp_path / "sites")
    doc = rb.model_dump(mode="json", exclude_none=True)
    doc["name"] = name
    doc["primary"]["infra"] = "aws/us-east-1"
    doc["secondary"] |= {
        "infra": "aws/us-west-2",
        "candidates": [{"infra": "aws/us-west-2", "accelerators": "H100:8"}],
    }
    doc["job"] = {"task": "task.yaml"}
    doc["plan"] = {"catalog": "snapshot"}
    path = rb.base_dir / f"{name}.yaml"
    (rb.base_dir / "task.yaml").write_text(TASK)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def stores(path: Path):
    rb = load_runbook(path)
    return open_store(rb.store_uri(rb.primary.store)), open_store(rb.store_uri(rb.secondary.store))


def test_a_flow_parameter_cannot_approve_the_failback_of_a_cloud_runbook(prefect_server, tmp_path, ledger):
    """`failback(approval=approve)` moved the fence and asked SkyPilot for GPUs."""
    from lifeboat_dr.flows.failback import failback

    path = cloud_runbook(tmp_path, "cloud-back")
    primary, secondary = stores(path)
    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:cloud-back-dr")  # failed over
    before = read_lease(primary)[0], read_lease(secondary)[0]

    state = failback(str(path), approval="approve", return_state=True)

    assert state.is_failed() and "approval=approve decides without a person" in state.message, state.message
    assert (read_lease(primary)[0], read_lease(secondary)[0]) == before, "nothing fenced"


def test_drill_is_no_parameter_of_the_failover_flow(prefect_server, tmp_path, ledger):
    """`failover(drill=..., approval=approve)` skipped the guard and the runbook's lock, and
    fenced the real stores: drills run only from the drill flow, on a sandbox."""
    from lifeboat_dr.flows.failover import failover

    path = cloud_runbook(tmp_path, "cloud-drill")
    primary, secondary = stores(path)
    before = read_lease(primary), read_lease(secondary)

    with pytest.raises(TypeError, match="drill"):
        failover(str(path), drill="gpu-fault", approval="approve", force=True, evidence=["forged: down"])

    assert (read_lease(primary), read_lease(secondary)) == before, "nothing fenced"
    assert ledger.read("cloud-drill") == []


# -- the serving path -------------------------------------------------------------------------
@pytest.fixture
def serving(tmp_path):
    """chat-serving rewritten onto this machine (toy servers behind a real HAProxy), its
    primary healthy, as a runbook file: (path, the router, the sandbox)."""
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.wiring import build_router

    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    folder = tmp_path / "serving"
    with serving_sandbox(rb, folder) as box:
        (folder / "jobs").mkdir()
        shutil.copy(ROOT / "runbooks" / rb.job.task, folder / rb.job.task)

        def write(**sections) -> Path:
            doc = amend(box.rb, **sections).model_dump(mode="json", exclude_none=True)
            path = folder / "chat-serving.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            return path

        yield write, build_router(box.rb)


def test_a_serving_failover_with_a_healthy_primary_stops_at_the_quorum(prefect_server, ledger, serving):
    """`failover` on a serving runbook with no evidence moved all traffic ("evidence: none
    recorded"): the serving path returned before the guard and checked no quorum."""
    from lifeboat_dr.flows.failover import failover

    write, router = serving
    path = write()
    before = router.weights()

    state = failover(str(path), return_state=True)

    assert state.is_failed() and "outage not confirmed" in state.message, state.message
    assert router.weights() == before, "no traffic moved"
    (entry,) = ledger.read("chat-serving")
    assert "traffic_switched" not in entry.phases
    assert any("outage not confirmed" in f.error for f in entry.failures)


def test_force_moves_a_healthy_serving_site_and_is_recorded(prefect_server, ledger, serving):
    """A person who knows better than the probes may force it: the ledger says who did what."""
    from lifeboat_dr.flows.failover import failover

    write, router = serving
    path = write()

    result = failover(str(path), force=True)

    assert result["outcome"] == "completed", result
    assert router.weights()["secondary"] > 0
    (entry,) = ledger.read("chat-serving")
    assert "force" in entry.notes and "quorum" in entry.notes["force"], entry.notes


def test_a_flow_parameter_cannot_approve_a_serving_failover(prefect_server, ledger, serving):
    """`failover(approval=approve)` on a serving runbook that asks a person moved all traffic."""
    from lifeboat_dr.flows.failover import failover

    write, router = serving
    path = write(approval={"required": True, "approvers": ["U0ONCALL"], "timeout": "1m"})
    before = router.weights()

    state = failover(str(path), approval="approve", evidence=["forged: primary down"], return_state=True)

    assert state.is_failed() and "approval=approve decides without a person" in state.message, state.message
    assert router.weights() == before, "no traffic moved"
