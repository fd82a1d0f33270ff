"""`failover --dry-run`: each example runbook's whole flow, rehearsed in a sandbox on a real server."""

import json
from pathlib import Path

import pytest

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.failover import failover

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "runbook, parity",
    [
        # died 3 steps after step 40: 3 of 20 (of 10) asked, below the minimum coverage 0.5; the
        # sandbox checkpoints every parity_steps, so the replay of the previous one proves it
        (
            "llama-70b-pretrain",
            "passed by a replay of step 20 (20 of 20 compared): 20 step(s) in 21..40 within 0.01",
        ),
        (
            "mistral-7b-sft",
            "passed by a replay of step 30 (10 of 10 compared): 10 step(s) in 31..40 within 0.02",
        ),
        ("batch-embed", "not provable (0 of 0 compared): loss parity disabled (parity_steps: 0)"),
    ],
)
def test_dry_run_fails_over_resumes_and_records_rto_and_rpo(prefect_server, ledger_path, runbook, parity):
    result = failover(str(ROOT / "runbooks" / f"{runbook}.yaml"), dry_run=True)

    assert result["outcome"] == "completed"
    assert result["checkpoint"].endswith("step-00000040")  # the newest certified sandbox checkpoint
    assert result["rto_s"] > 0 and result["rpo_s"] >= 0
    assert Path(result["timeline"]).stat().st_size > 10_000  # a real PNG, not an empty file
    (entry,) = LedgerFile(ledger_path).read(runbook)
    assert entry.drill and entry.outcome == "completed"
    for phase in ("confirmed", "fenced", "certified", "planned", "prestaged", "approval_granted",
                  "provisioned", "checkpoint_loaded", "first_step"):  # fmt: skip
        assert phase in entry.phases, phase
    # parity is recorded as passed only when steps were compared; disabled is never "passed"
    assert ("parity_passed" in entry.phases) == ("disabled" not in parity)
    assert entry.notes["parity"].startswith(parity)
    # the user's own task went through SkyPilot's dry-run launch on the first feasible candidate
    assert entry.notes["skypilot dry run"].startswith(f"SkyPilot dry-run launch of {runbook}-dryrun on ")
    assert "catalog" in entry.notes["skypilot dry run"]  # the price says where it came from


def test_dry_run_leaves_no_cluster_behind(prefect_server, ledger_path):
    failover(str(ROOT / "runbooks" / "demo.yaml"), dry_run=True)
    clusters = list(Path(".lifeboat/sandbox").glob("*/.lifeboat/clusters/*/state.json"))
    assert clusters == [], [json.loads(c.read_text()) for c in clusters]


def test_a_rejected_failover_ends_cancelled_with_the_reason_named_and_tagged(prefect_server, ledger_path):
    """Rejected or aborted runs must not look like a success (green Completed) in the UI."""
    from lifeboat_dr.flows.failover import outcome_of

    state = failover(str(ROOT / "runbooks" / "demo.yaml"), dry_run=True, approval="reject", return_state=True)
    assert state.is_cancelled() and "failover aborted: rejected by console" in state.message
    assert outcome_of(state)["outcome"] == "aborted"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert run.name.startswith("failover-demo-20") and run.state.type.value == "CANCELLED"
    assert {"runbook:demo", "workload:finetuning", "dry-run"} <= set(run.tags)
