"""The `fleet-failover` flow on a real Prefect server: one plan, one gate that refuses what the
single-runbook gate refuses, each placed runbook's own dry-run failover, the fleet's entry, and
a re-run after a crash that starts no second failover."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
import yaml
from prefect import flow
from prefect.runtime import flow_run as current_run

from lifeboat_dr.core.approval_proof import ASK_KEY, Ask, sign_decision
from lifeboat_dr.core.fleet.record import FleetLedger
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.failover import run_failover
from lifeboat_dr.flows.fleet_failover import fleet_failover, run_fleet
from lifeboat_dr.providers.chat.base import ApprovalDecision
from tests.approval.conftest import in_thread, wait_until
from tests.fleet.fleet_runbooks import fleet_runbook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
USC1 = "gcp/us-central1"


def three_runbooks(folder: Path) -> list[str]:
    """128 H100s of quota for three 64-GPU jobs: the two costliest run, the third waits."""
    a = fleet_runbook(folder, "pretrain-a", gpus=64, price=4.0, quota=((USC1, "H100", 128),))
    b = fleet_runbook(folder, "pretrain-b", gpus=64, price=3.0)
    c = fleet_runbook(folder, "pretrain-c", gpus=64, price=2.0)
    return [str(a), str(b), str(c)]


def lines_of(ledger_path: Path, run_id: str) -> int:
    """Snapshots the ledger holds of one run id: a second failover would add some."""
    if not ledger_path.exists():
        return 0
    return sum(json.loads(line)["run_id"] == run_id for line in ledger_path.read_text().splitlines())


def test_a_fleet_dry_run_fails_over_the_placed_jobs_each_on_its_own_and_records_the_fleet(
    prefect_server, tmp_path, ledger_path
):
    state = fleet_failover(runbooks=three_runbooks(tmp_path), dry_run=True, recovery="4h", return_state=True)

    assert state.is_completed(), state.message
    result = state.result()
    jobs = {j["runbook"]: j for j in result["jobs"]}
    assert [jobs[n]["outcome"] for n in ("pretrain-a", "pretrain-b", "pretrain-c")] == [
        "completed",
        "completed",
        "waiting",
    ]
    assert jobs["pretrain-c"]["expected_wait_s"] == 4 * 3600 and jobs["pretrain-c"]["rto_s"] is None
    for name in ("pretrain-a", "pretrain-b"):
        (entry,) = LedgerFile(ledger_path).read(name)  # its own entry, its own run id
        assert entry.run_id == jobs[name]["run_id"] and entry.drill and entry.outcome == "completed"
        assert {"fenced", "certified", "approval_granted", "first_step"} <= set(entry.phases)
        assert f"the fleet decision {result['fleet']}" in entry.notes["approval"]
        assert jobs[name]["rto_s"] == entry.rto.total_seconds()
        assert jobs[name]["met"] == (entry.rto.total_seconds() <= jobs[name]["rto_target_s"])
    assert LedgerFile(ledger_path).read("pretrain-c") == []  # it waits: no failover started
    (fleet,) = FleetLedger().read()
    assert (
        fleet.run_id == result["run_id"] and fleet.drill and fleet.decision.startswith("approved by console")
    )


@flow(name="fleet-rerun-under-test", persist_result=False)
def fleet_again(runbooks: list[str], run_id: str, first_member: str | None = None) -> dict:
    """One attempt of the fleet run `run_id` (a re-run keeps the run id); `first_member`: the
    crashed attempt got that far, its failover done, nothing recorded by the fleet."""
    if first_member is not None:
        name = Path(first_member).stem
        run_failover(first_member, run_id=f"{run_id}-{name}", flow_run=current_run, dry_run=True)
        return {}
    state = run_fleet(runbooks, run_id=run_id, flow_run=current_run, dry_run=True)
    return state.result()


def test_a_fleet_rerun_after_a_crash_starts_no_second_failover(prefect_server, tmp_path, ledger_path):
    runbooks, fleet_run = three_runbooks(tmp_path), "8d4c1a52-0000-4000-8000-00000000f1ee"
    member_a, member_b = f"{fleet_run}-pretrain-a", f"{fleet_run}-pretrain-b"
    fleet_again(runbooks, fleet_run, first_member=runbooks[0])  # crashed after a's failover
    a_lines = lines_of(ledger_path, member_a)
    assert a_lines > 0 and lines_of(ledger_path, member_b) == 0

    out = fleet_again(runbooks, fleet_run)  # the re-run: a is done, b goes, c still waits
    assert lines_of(ledger_path, member_a) == a_lines
    assert [j["outcome"] for j in out["jobs"]] == ["completed", "completed", "waiting"]
    b_lines = lines_of(ledger_path, member_b)

    again = fleet_again(runbooks, fleet_run)  # twice: nothing left to do, nothing asked
    assert (lines_of(ledger_path, member_a), lines_of(ledger_path, member_b)) == (a_lines, b_lines)
    assert again["decision"].startswith("none asked: every placed job had completed or was denied")
    assert len(FleetLedger().read()) == 2


def _paused(run_id: str | None, seen: set[str]):
    """The fleet run paused at its gate for a pause not seen before: (run id, pause key)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    with get_client(sync_client=True) as client:
        if run_id is None:
            runs = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["fleet-failover"])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                ),
            )
            if not runs:
                return None
            run_id = str(runs[0].id)
        state = client.read_flow_run(UUID(run_id)).state
    key = state.state_details.pause_key if state and state.is_paused() else None
    return (run_id, key) if key and key not in seen else None


def test_the_fleet_gate_refuses_unsigned_member_signed_and_partly_allowed_decisions(
    prefect_server, tmp_path, ledger_path, monkeypatch
):
    from prefect.flow_runs import resume_flow_run
    from prefect.input.run_input import read_flow_run_input

    from lifeboat_dr.core.approval_keys import generate, load_signing_key, public_text

    key_file = tmp_path / "keys" / "signing.pem"
    key_file.parent.mkdir()
    monkeypatch.setenv("LIFEBOAT_APPROVAL_PUBLIC_KEYS", public_text(generate(key_file)))
    signing = load_signing_key(key_file)
    runbooks = three_runbooks(tmp_path)
    doc = yaml.safe_load(Path(runbooks[1]).read_text())  # U01ONCALL02 may approve pretrain-a only
    doc["approval"]["approvers"] = ["U01ONCALL01", "U0OTHER"]
    Path(runbooks[1]).write_text(yaml.safe_dump(doc, sort_keys=False))

    t = in_thread(fleet_failover, runbooks=runbooks, recovery="4h", return_state=True)
    seen: set[str] = set()
    run_id, pause = wait_until(lambda: _paused(None, seen), timeout=120)
    ask = Ask.from_dict(read_flow_run_input(ASK_KEY, flow_run_id=UUID(run_id)))
    assert ask.runbook.startswith("fleet-") and ask.run_id == run_id

    def now():
        return datetime.now(UTC)

    oncall1 = ApprovalDecision(approved=True, reason="go", approver="U01ONCALL01", via="slack")
    oncall2 = ApprovalDecision(approved=True, reason="go", approver="U01ONCALL02", via="slack")
    attempts = [
        {"approved": True, "reason": "go", "approver": "U01ONCALL01", "via": "slack"},  # unsigned
        sign_decision(signing, Ask(run_id, "pretrain-a", "failover", None), oncall1, now()),  # a member's
        sign_decision(signing, ask, oncall2, now()),  # signed, on one placed runbook's list only
    ]
    for run_input in attempts:
        seen.add(pause)
        resume_flow_run(UUID(run_id), run_input=run_input)
        _, pause = wait_until(lambda: _paused(run_id, seen), timeout=60)
    no = ApprovalDecision(approved=False, reason="not now", approver="U01ONCALL01", via="slack")
    resume_flow_run(UUID(run_id), run_input=sign_decision(signing, ask, no, now()))
    t.join(timeout=120)
    assert not t.is_alive() and "error" not in t.out, t.out
    state = t.out["value"]
    assert state.is_cancelled() and "rejected by U01ONCALL01 via slack: not now" in state.message
    (entry,) = FleetLedger().read()
    refused = entry.notes["approval refused"]
    assert "not signed by Slack or the identity proxy" in refused
    assert "signed for runbook 'pretrain-a'" in refused
    assert "U01ONCALL02" in refused
    assert [j.outcome for j in entry.jobs] == ["not run", "not run", "waiting"]
    assert not ledger_path.exists() or LedgerFile(ledger_path).read() == []  # no failover started


def test_a_runbook_given_twice_fails_the_fleet_in_one_line_before_anything_is_asked(
    prefect_server, tmp_path, ledger_path
):
    a = three_runbooks(tmp_path)[0]
    again = tmp_path / "again.yaml"
    again.write_text(Path(a).read_text())  # the same runbook under another path
    state = fleet_failover(runbooks=[a, str(again)], dry_run=True, return_state=True)
    assert state.is_failed() and state.message == "fleet failover: runbook(s) given twice: pretrain-a"
    assert FleetLedger().read() == [] and not ledger_path.exists()


def test_a_per_job_decision_fails_over_the_approved_job_and_records_the_denied_one(
    prefect_server, tmp_path, ledger_path, monkeypatch
):
    """The real gate, real keys: a per-job answer naming a job the plan did not place is
    refused at Prefect's door (the form's enum), one signed for another plan by the gate; then
    pretrain-a approved and pretrain-b denied: a fails over, b's own entry says denied."""
    from prefect.flow_runs import resume_flow_run
    from prefect.input.run_input import read_flow_run_input

    from lifeboat_dr.core.approval_keys import generate, load_signing_key, public_text

    key_file = tmp_path / "keys" / "signing.pem"
    key_file.parent.mkdir()
    monkeypatch.setenv("LIFEBOAT_APPROVAL_PUBLIC_KEYS", public_text(generate(key_file)))
    signing = load_signing_key(key_file)
    runbooks = three_runbooks(tmp_path)

    t = in_thread(
        fleet_failover, runbooks=runbooks, dry_run=True, approval="wait", recovery="4h", return_state=True
    )
    seen: set[str] = set()
    run_id, pause = wait_until(lambda: _paused(None, seen), timeout=120)
    ask = Ask.from_dict(read_flow_run_input(ASK_KEY, flow_run_id=UUID(run_id)))
    assert ask.jobs == ("pretrain-a", "pretrain-b")  # pretrain-c waits: not asked about

    def signed(for_ask, jobs):
        d = ApprovalDecision(approved=True, reason="a first", approver="U01ONCALL01", via="slack", jobs=jobs)
        return sign_decision(signing, for_ask, d, datetime.now(UTC))

    with pytest.raises(RuntimeError, match="Cannot resume this run"):  # not in the form's enum
        resume_flow_run(UUID(run_id), run_input=signed(ask, ["pretrain-a", "pretrain-c"]))
    assert _paused(run_id, set()) == (run_id, pause)  # still waiting at the same pause
    other_plan = Ask(run_id, "fleet-0000000000000000", "failover", None, jobs=ask.jobs)
    seen.add(pause)
    resume_flow_run(UUID(run_id), run_input=signed(other_plan, ["pretrain-a"]))
    _, pause = wait_until(lambda: _paused(run_id, seen), timeout=60)
    resume_flow_run(UUID(run_id), run_input=signed(ask, ["pretrain-a"]))
    t.join(timeout=300)
    assert not t.is_alive() and "error" not in t.out, t.out
    state = t.out["value"]
    assert state.is_completed(), state.message
    assert state.message.endswith("; 1 wait; 1 denied")
    result = state.result()
    jobs = {j["runbook"]: j for j in result["jobs"]}
    assert [jobs[n]["outcome"] for n in ("pretrain-a", "pretrain-b", "pretrain-c")] == [
        "completed",
        "denied",
        "waiting",
    ]
    assert result["decision"] == (
        "approved per job (pretrain-a; the others denied) by U01ONCALL01 via slack: a first"
    )
    assert "signed for runbook 'fleet-0000000000000000'" in result["notes"]["approval refused"]
    (a,) = LedgerFile(ledger_path).read("pretrain-a")
    assert a.outcome == "completed" and "fenced" in a.phases
    (b,) = LedgerFile(ledger_path).read("pretrain-b")  # its own entry: asked, denied, nothing done
    assert b.run_id == jobs["pretrain-b"]["run_id"] and b.outcome == "aborted"
    assert set(b.phases) == {"approval_requested"} and b.rto is None
    assert b.notes["approval"].startswith("denied by U01ONCALL01 via slack, per job (approved: pretrain-a)")
    assert LedgerFile(ledger_path).read("pretrain-c") == []

    b_lines = lines_of(ledger_path, b.run_id)
    again = fleet_again(runbooks, run_id)  # a re-run of the fleet run: b stays denied, nothing asked
    assert again["decision"] == (
        "none asked: every placed job had completed or was denied (pretrain-a, pretrain-b); "
        "denied earlier: pretrain-b"
    )
    assert [j["outcome"] for j in again["jobs"]] == ["completed", "denied", "waiting"]
    assert lines_of(ledger_path, b.run_id) == b_lines
