"""Every drill kind, end to end on the demo runbook: the fault is injected into a sandbox,
the real failover runs in the `drill` flow on the shared server, and every check passes."""

import pytest
import yaml
from prefect import flow

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.drill import DrillFailed, drill, run_failover
from lifeboat_dr.flows.drills import run_drill
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.standins.trainer.jobs import TRAINERS
from tests.drills.conftest import DEMO

pytestmark = pytest.mark.integration  # the shared Prefect server
TORCH_MISSING = TRAINERS["torch"].missing()


@pytest.mark.parametrize(
    "kind, scope",
    [
        ("process-kill", None),
        ("gpu-fault", None),
        ("region-outage", "az"),
        ("region-outage", "region"),
        ("corrupted-replica", None),
        ("approval-timeout", None),
        ("stale-primary", None),
        ("zombie-primary", None),
    ],
)
def test_drill_passes_on_the_demo_runbook(prefect_server, workdir, kind, scope):
    (result,) = drill(str(DEMO), kind=kind, scope=scope)

    failing = [c for c in result["checks"] if not c[1]]
    assert result["passed"] and not failing, failing
    assert len(result["checks"]) >= 4  # the kind's own checks, plus ledger mark and teardown
    (entry,) = LedgerFile(workdir / "ledger.jsonl").read("demo")
    assert entry.drill and entry.notes["drill"] == kind and entry.run_id == result["run_id"]
    assert list(workdir.glob(".lifeboat/sandbox/*/.lifeboat/clusters/*/state.json")) == []


def test_failback_drill_fails_over_then_back_and_records_both(prefect_server, workdir):
    (result,) = drill(str(DEMO), kind="failback")

    assert result["passed"], [c for c in result["checks"] if not c[1]]
    entries = LedgerFile(workdir / "ledger.jsonl").read("demo")
    assert sorted(e.kind for e in entries) == ["failback", "failover"] and all(e.drill for e in entries)
    back = next(e for e in entries if e.kind == "failback")
    assert back.drill and back.outcome == "completed" and back.rto is not None and back.rpo is not None
    # parity was proven against the secondary job's own losses, from the handed-back step
    assert "parity_passed" in back.phases and "within" in back.notes["parity"], back.notes
    assert "rollback" not in back.notes, back.notes
    handed_back = int(back.notes["handover"].split("resumes from step ")[1].split(",")[0])
    assert int(back.checkpoint.rsplit("-", 1)[1]) == handed_back, back.notes
    assert list(workdir.glob(".lifeboat/sandbox/*/.lifeboat/clusters/*/state.json")) == []


def test_approval_timeout_with_on_timeout_proceed_completes_the_failover(prefect_server, workdir):
    doc = yaml.safe_load(DEMO.read_text())
    doc["approval"] = {"required": True, "approvers": ["U0ONCALL"], "on_timeout": "proceed"}
    runbook = workdir / "demo.yaml"
    runbook.write_text(yaml.safe_dump(doc))

    (result,) = drill(str(runbook), kind="approval-timeout")

    assert result["passed"], result["checks"]
    assert result["outcome"] == "completed"
    (entry,) = LedgerFile(workdir / "ledger.jsonl").read("demo")
    assert "approval_granted" in entry.phases and "nobody answered" in entry.notes["approval"]


@flow
def _drill_with(kind: str, options: dict) -> dict:
    return run_drill(load_runbook(str(DEMO)), kind, failover=run_failover, options=options).to_dict()


def test_corrupting_both_newest_checkpoints_fails_the_fallback_check(prefect_server, workdir):
    result = _drill_with("corrupted-replica", {"corrupt": 2})

    checks = {name: ok for name, ok, _ in result["checks"]}
    assert not result["passed"]
    assert checks["certification rejects it for its CRC"]  # the newest is still caught...
    assert not checks["certification falls back to the previous checkpoint"]  # ...but it went further back
    assert checks["no cluster left behind"]


def test_the_corrupted_replica_drill_rots_a_data_shard_never_a_marker(prefect_server, workdir):
    (result,) = drill(str(DEMO), kind="corrupted-replica")

    checks = {name: (ok, detail) for name, ok, detail in result["checks"]}
    assert result["passed"], result["checks"]
    ok, flipped = checks["the corrupted shard keeps its size"]
    assert flipped.split(" byte ")[0].rsplit("/", 1)[1] in ("model.npy", "optim.npy"), flipped
    assert "crc mismatch" in checks["certification rejects it for its CRC"][1]


def test_a_failing_drill_fails_the_flow_run(prefect_server, workdir):
    doc = yaml.safe_load(DEMO.read_text())
    doc["detection"]["quorum"] = 3  # a process kill moves two signals: this runbook never confirms it
    runbook = workdir / "demo.yaml"
    runbook.write_text(yaml.safe_dump(doc))

    with pytest.raises(DrillFailed, match="detection confirmed the outage by quorum"):
        drill(str(runbook), kind="process-kill")
    assert list(workdir.glob(".lifeboat/sandbox/*/.lifeboat/clusters/*/state.json")) == []


@pytest.mark.skipif(TORCH_MISSING is not None, reason=TORCH_MISSING or "")
def test_process_kill_drill_with_the_torch_job_resumes_dcp_bit_for_bit(prefect_server, workdir):
    (result,) = drill(str(DEMO), kind="process-kill", trainer="torch")

    checks = {name: (ok, detail) for name, ok, detail in result["checks"]}
    assert result["kind"] == "process-kill" and result["passed"], result["checks"]
    assert "identical" in checks["resumed losses equal an uninterrupted run's exactly"][1]
    (entry,) = LedgerFile(workdir / "ledger.jsonl").read("demo")
    assert entry.checkpoint.rstrip("/").split("/")[-1].startswith("step-")
    assert list(workdir.glob(".lifeboat/sandbox/*")) == []  # a passed drill leaves no sandbox
