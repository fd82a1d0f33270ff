"""One decision for the fleet, without a server: what is signed, who may sign it, what the card
says, what a member's ledger records, and what no parameter can carry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lifeboat_dr.core.approval import ApprovalProcess
from lifeboat_dr.core.approval_proof import Ask, Unverified, sign_decision, verify_signed
from lifeboat_dr.core.fleet.decision import FleetDecisionGate, card_lines, fleet_approval, fleet_name
from lifeboat_dr.core.fleet.plan import FleetJob, Place, plan_fleet
from lifeboat_dr.core.fleet.record import FleetEntry, FleetLedger, job_record
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.chat.base import ApprovalDecision
from lifeboat_dr.runbooks.model import Approval

KEY = Ed25519PrivateKey.generate()
PUBLIC = (KEY.public_key(),)
T0 = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
RUN = "8d4c1a52-0000-4000-8000-0000000000f1"
H100, A100 = Place("gcp/us-central1", "H100"), Place("gcp/us-central1", "A100-80GB")
JOBS = [
    FleetJob("chat", "realtime-inference", 16, 10, (H100,), gpu_hour_usd=4.0),
    FleetJob("pretrain", "pretraining", 128, 1800, (H100, A100), gpu_hour_usd=3.8),
    FleetJob("sft", "finetuning", 64, 3600, (H100, A100), gpu_hour_usd=3.8),
]
CAPACITY = {H100: 96, A100: 128}
ALICE = ApprovalDecision(approved=True, reason="region down", approver="U0ALICE", via="slack")


def plan(capacity=CAPACITY):
    return plan_fleet(JOBS, capacity)


def fleet_ask(p=None) -> Ask:
    return Ask(RUN, fleet_name(p or plan()), "failover", None)


def test_a_signed_fleet_decision_verifies_for_its_own_plan_and_run():
    ask = fleet_ask()
    d = verify_signed(PUBLIC, ask, sign_decision(KEY, ask, ALICE, T0), T0 + timedelta(seconds=3))
    assert (d.approved, d.approver) == (True, "U0ALICE")


def test_an_unsigned_fleet_resume_is_refused():
    with pytest.raises(Unverified, match="not signed"):
        verify_signed(
            PUBLIC, fleet_ask(), {"approved": True, "reason": "x", "approver": "U0ALICE", "via": "slack"}, T0
        )


def test_a_decision_signed_for_one_member_runbook_is_not_the_fleets():
    member = Ask(RUN, "pretrain", "failover", 3)
    signed = sign_decision(KEY, member, ALICE, T0)
    with pytest.raises(Unverified):
        verify_signed(PUBLIC, fleet_ask(), signed, T0)
    bare = {
        k: v for k, v in signed.items() if k not in ("runbook", "epoch")
    }  # the fields that name it, dropped
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(PUBLIC, fleet_ask(), bare, T0)


def test_a_fleet_decision_signed_for_another_plan_is_refused():
    other = plan({H100: 200, A100: 128})  # pretrain gets H100s: another plan, another digest
    assert fleet_name(other) != fleet_name(plan())
    signed = sign_decision(KEY, fleet_ask(other), ALICE, T0)
    with pytest.raises(Unverified, match="signed for runbook"):
        verify_signed(PUBLIC, fleet_ask(), signed, T0)


def test_a_fleet_decision_for_another_fleet_run_is_refused():
    signed = sign_decision(KEY, Ask("another-run", fleet_name(plan()), "failover", None), ALICE, T0)
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(PUBLIC, fleet_ask(), signed, T0)


def sections():
    a = Approval(approvers=["U0ALICE", "U0BOB"], logins={"U0ALICE": ["alice", "al"], "U0BOB": ["bob"]})
    b = Approval(
        approvers=["U0ALICE", "U0CAROL"], logins={"U0ALICE": ["alice"]}, timeout=timedelta(minutes=5)
    )
    return [a, b]


def test_only_an_approver_on_every_placed_runbooks_list_may_decide_the_fleet():
    section = fleet_approval(sections())
    assert section.approvers == ["U0ALICE"] and section.logins == {"U0ALICE": ["alice"]}
    assert section.timeout == timedelta(minutes=5) and section.on_timeout == "abort"
    process = ApprovalProcess.from_runbook(section, T0)
    assert process.refusal(ALICE, T0) is None
    bob = ALICE.model_copy(update={"approver": "U0BOB"})  # on the first runbook's list only
    assert process.refusal(bob, T0) is not None
    al = ApprovalDecision(approved=True, reason="ok", approver="al", via="ui")  # a login only one maps
    assert process.refusal(al, T0) is not None


def test_no_approver_common_to_the_fleet_is_one_config_error_outside_a_rehearsal():
    a, b = Approval(approvers=["U0BOB"]), Approval(approvers=["U0CAROL"])
    with pytest.raises(ConfigError, match="no approver is on every placed runbook"):
        fleet_approval([a, b])
    assert fleet_approval([a, b], rehearsal=True).approvers == ["U0BOB"]  # its console decides


def test_the_timeout_proceeds_only_when_every_runbook_says_so():
    proceed = Approval(approvers=["U0ALICE"], on_timeout="proceed")
    assert fleet_approval([proceed, proceed]).on_timeout == "proceed"
    assert fleet_approval([proceed, Approval(approvers=["U0ALICE"])]).on_timeout == "abort"


def test_the_card_lists_every_job_placement_gpu_price_expected_rto_and_the_waits():
    p = plan()
    lines = card_lines(
        p, {j.name: j for j in JOBS}, {"chat": timedelta(seconds=40), "sft": timedelta(minutes=9)}
    )
    assert lines == [
        "chat: 16x H100 on gcp/us-central1, $64/h, expected RTO 40s (target 10s)",
        "pretrain: 128x A100-80GB (downgraded from H100) on gcp/us-central1, $486/h, "
        "expected RTO unknown (target 30m)",
        "sft: 64x H100 on gcp/us-central1, $243/h, expected RTO 9m (target 1h)",
    ]
    tight = plan({H100: 16, A100: 64})
    waits = card_lines(tight, {j.name: j for j in JOBS}, {})
    assert waits[1].startswith("pretrain: waits an unknown time, then the recovered primary ($486/h")
    assert waits[1].endswith("not failed over now (target 30m)")


class Ledger:
    def __init__(self):
        self.phases, self.notes, self.failed = [], {}, []

    def mark(self, phase, at=None):
        self.phases.append(phase)

    def note(self, key, value):
        self.notes[key] = value

    def fail(self, phase, error, outcome="failed"):
        self.failed.append((phase, error, outcome))


def test_a_member_records_the_fleet_decision_as_its_own_approval_naming_the_fleet():
    ledger = Ledger()
    gate = FleetDecisionGate(ALICE, "fleet-0123456789abcdef", RUN)
    assert gate.request(card=None, ledger=ledger) is ALICE
    assert ledger.phases == ["approval_requested", "approval_granted"]
    assert ledger.notes["approval"] == (
        f"approved by U0ALICE via slack: region down (the fleet decision fleet-0123456789abcdef, run {RUN})"
    )
    rejected = Ledger()
    FleetDecisionGate(ALICE.model_copy(update={"approved": False}), "fleet-x", RUN).request(None, rejected)
    assert rejected.phases == ["approval_requested"] and rejected.failed[0][2] == "aborted"


def test_no_parameter_of_either_flow_can_carry_a_decision_or_a_gate():
    from lifeboat_dr.flows.failover import failover
    from lifeboat_dr.flows.fleet_failover import fleet_failover

    for f in (failover, fleet_failover):
        assert not {"gate", "decision", "signature"} & set(f.parameters.properties), f.name
        assert f.parameters.properties["approval"]["anyOf"][0]["enum"] == ["wait", "approve", "reject"]


def test_the_fleet_entry_says_which_jobs_met_their_class_rto(tmp_path):
    from lifeboat_dr.core.ledger import LedgerEntry

    p = plan({H100: 16, A100: 128})  # sft waits
    by = {pl.job: pl for pl in p.placements}
    started = T0
    chat = LedgerEntry(runbook="chat", run_id=f"{RUN}-chat", rto_target=timedelta(seconds=10),
                       rpo_target=timedelta(minutes=5), outcome="completed",
                       phases={"outage_start": started, "first_step": started + timedelta(seconds=8)})  # fmt: skip
    records = [
        job_record(JOBS[0], by["chat"], chat),
        job_record(JOBS[1], by["pretrain"], None),
        job_record(JOBS[2], by["sft"], None, outcome="waiting"),
    ]
    entry = FleetEntry(fleet=fleet_name(p), run_id=RUN, plan_digest="d", decision="approved", jobs=records)
    assert [(r.runbook, r.outcome, r.met) for r in entry.jobs] == [
        ("chat", "completed", True),
        ("pretrain", "not run", None),
        ("sft", "waiting", None),
    ]
    assert entry.summary() == "1 of 1 failed-over job(s) met their class RTO; 1 wait"
    book = FleetLedger(tmp_path / "fleet.jsonl")
    book.append(entry)
    book.append(entry)
    assert [e.fleet for e in book.read()] == [entry.fleet] * 2


def test_one_card_in_the_prefect_ui_and_in_slack_lists_every_job():
    from lifeboat_dr.flows.approval_screen import card_markdown
    from lifeboat_dr.providers.chat.base import ApprovalCard
    from lifeboat_dr.providers.chat.slack import card_blocks

    p = plan({H100: 16, A100: 128})
    lines = card_lines(p, {j.name: j for j in JOBS}, {"chat": timedelta(seconds=40)})
    card = ApprovalCard(
        runbook=fleet_name(p), run_id=RUN, jobs=lines, cost_per_hour=550.4, approvers=["U0ALICE"]
    )
    markdown, slack = card_markdown(card), str(card_blocks(card))
    for n, line in enumerate(lines, 1):
        assert f"**Job {n}:** {line}" in markdown
        assert line.replace("&", "&amp;") in slack or line in slack
    assert "Certified checkpoint" not in markdown  # each job certifies its own after the decision
    assert "$550.40/h" in markdown


def fleet_ask_per_job(p=None) -> Ask:
    p = p or plan()
    return Ask(RUN, fleet_name(p), "failover", None, jobs=tuple(pl.job for pl in p.placed()))


def test_a_per_job_decision_verifies_with_the_jobs_it_approves():
    ask = fleet_ask_per_job()
    some = ALICE.model_copy(update={"jobs": ["chat", "sft"]})
    d = verify_signed(PUBLIC, ask, sign_decision(KEY, ask, some, T0), T0)
    assert d.jobs == ["chat", "sft"] and d.approves("chat") and not d.approves("pretrain")
    whole = verify_signed(PUBLIC, ask, sign_decision(KEY, ask, ALICE, T0), T0)  # Slack's buttons: the plan
    assert whole.jobs is None and all(whole.approves(j.name) for j in JOBS)
    rejected = ALICE.model_copy(update={"approved": False, "jobs": ["chat"]})
    assert not verify_signed(PUBLIC, ask, sign_decision(KEY, ask, rejected, T0), T0).approves("chat")


def test_the_jobs_of_a_signed_decision_cannot_be_changed_added_or_dropped():
    ask = fleet_ask_per_job()
    signed = sign_decision(KEY, ask, ALICE.model_copy(update={"jobs": ["chat"]}), T0)
    for forged in (
        signed | {"jobs": ["chat", "pretrain"]},  # a job added
        {k: v for k, v in signed.items() if k != "jobs"},  # dropped: the whole plan approved
    ):
        with pytest.raises(Unverified, match="bad signature"):
            verify_signed(PUBLIC, ask, forged, T0)
    whole = sign_decision(KEY, ask, ALICE.model_copy(update={"approved": False}), T0)
    with pytest.raises(Unverified, match="bad signature"):  # a rejection turned into a per-job approval
        verify_signed(PUBLIC, ask, whole | {"approved": True, "jobs": ["chat"]}, T0)


def test_a_per_job_decision_naming_a_job_not_in_the_plan_is_refused():
    ask = fleet_ask_per_job()
    stray = sign_decision(KEY, ask, ALICE.model_copy(update={"jobs": ["chat", "someone-else"]}), T0)
    with pytest.raises(Unverified, match="names job\\(s\\) not in the plan: someone-else"):
        verify_signed(PUBLIC, ask, stray, T0)
    for bad in ("chat", [1], [""]):
        with pytest.raises(Unverified, match="not a list of names"):
            verify_signed(PUBLIC, ask, stray | {"jobs": bad}, T0)


def test_a_per_job_decision_signed_for_another_plan_or_at_a_runbooks_gate_is_refused():
    other = fleet_ask_per_job(plan({H100: 200, A100: 128}))
    signed = sign_decision(KEY, other, ALICE.model_copy(update={"jobs": ["chat"]}), T0)
    with pytest.raises(Unverified, match="signed for runbook"):
        verify_signed(PUBLIC, fleet_ask_per_job(), signed, T0)
    member = Ask(RUN, "chat", "failover", 3)  # a runbook's own gate asks about the runbook whole
    per_job = sign_decision(KEY, member, ALICE.model_copy(update={"jobs": ["chat"]}), T0)
    with pytest.raises(Unverified, match="per-job decision, but this gate asks about chat as a whole"):
        verify_signed(PUBLIC, member, per_job, T0)


def test_a_fleet_ask_publishes_its_placed_jobs_and_a_runbooks_ask_reads_as_before():
    ask = fleet_ask_per_job()
    assert Ask.from_dict(ask.to_dict()) == ask and ask.to_dict()["jobs"] == ["chat", "pretrain", "sft"]
    member = Ask(RUN, "chat", "failover", 3)
    assert member.to_dict() == {"run_id": RUN, "runbook": "chat", "action": "failover", "epoch": 3}


def test_a_denied_member_records_the_denial_as_its_own_approval_and_aborts():
    some = ALICE.model_copy(update={"jobs": ["chat"]})
    approved, denied = Ledger(), Ledger()
    FleetDecisionGate(some, "fleet-x", RUN, job="chat").request(None, approved)
    said = FleetDecisionGate(some, "fleet-x", RUN, job="sft").request(None, denied)
    assert approved.phases == ["approval_requested", "approval_granted"]
    assert not said.approved and denied.phases == ["approval_requested"]
    assert denied.notes["approval"] == (
        f"denied by U0ALICE via slack, per job (approved: chat): region down (the fleet decision fleet-x, run {RUN})"
    )
    assert denied.failed[0][2] == "aborted"


def test_the_fleets_form_lists_the_placed_jobs_every_one_approved_by_default():
    from lifeboat_dr.flows.approval_screen import approval_form
    from lifeboat_dr.providers.chat.base import ApprovalCard

    card = ApprovalCard(runbook="fleet-x", run_id=RUN, jobs=["chat: ...", "sft: ..."], placed=["chat", "sft"])
    jobs = approval_form(card).model_json_schema()["properties"]["jobs"]
    assert jobs["items"]["enum"] == ["chat", "sft"] and jobs["default"] == ["chat", "sft"]
    assert "deny" in jobs["description"]
    one = approval_form(ApprovalCard(runbook="llama", run_id=RUN)).model_json_schema()
    assert "jobs" not in one["properties"]  # a runbook's own gate asks about it whole


def test_the_policys_resume_at_the_deadline_passes_the_fleets_form_as_prefect_checks_it():
    from prefect.utilities.schema_tools import ValidationError, validate

    from lifeboat_dr.flows.approval_screen import fleet_form

    schema = fleet_form(["chat"]).model_json_schema()
    policy = ApprovalDecision(approved=False, reason="nobody answered", approver="policy", via="policy")
    validate(policy.model_dump(mode="json"), schema, raise_on_error=True)  # the whole plan: no `jobs`
    with pytest.raises(ValidationError):  # a job the plan did not place: Prefect refuses the resume
        validate({"approved": True, "reason": "x", "jobs": ["sft"]}, schema, raise_on_error=True)


def test_a_whole_plan_answer_read_through_the_fleets_form_gains_no_jobs():
    """The form's default (every placed job) must not be added to what was signed: Slack's
    whole-plan click would then read as a per-job answer whose signature does not match."""
    from lifeboat_dr.flows.approval_screen import fleet_form

    ask = fleet_ask_per_job()
    signed = sign_decision(KEY, ask, ALICE, T0)
    read = fleet_form(list(ask.jobs)).model_validate(signed)
    assert read.jobs == list(ask.jobs)  # the form's default, which the gate must not verify
    d = verify_signed(PUBLIC, ask, read.model_dump(exclude_unset=True), T0)  # as flows/approval.py reads it
    assert d.jobs is None and d.approved
