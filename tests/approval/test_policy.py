import pytest

from lifeboat_dr.core.approval import ApprovalProcess, Escalate
from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via

from .conftest import T0, make_runbook, minutes


def _gate(tmp_path, **approval):
    return ApprovalProcess.from_runbook(make_runbook(tmp_path, **approval).approval, T0)


def test_an_approver_answering_in_time_decides(tmp_path):
    gate = _gate(tmp_path)
    assert gate.tick(T0 + minutes(5)) is None
    d = gate.decide(
        ApprovalDecision(approved=True, reason="primary is gone", approver="U0ALICE", via="slack"),
        T0 + minutes(6),
    )
    assert d.approved and [s.kind for s in gate.trail] == ["requested", "decided"]
    assert gate.trail[-1].who == "U0ALICE" and "approved via slack: primary is gone" in gate.trail[-1].why


def test_nobody_answering_aborts_by_default_and_says_why(tmp_path):
    gate = _gate(tmp_path)
    policy = gate.tick(T0 + minutes(15))
    assert isinstance(policy, ApprovalDecision) and not policy.approved and policy.via is Via.policy
    assert "on_timeout=abort" in policy.reason
    gate.decide(policy, T0 + minutes(15))
    assert [s.kind for s in gate.trail] == ["requested", "timed_out", "decided"]


def test_proceed_policy_approves_on_timeout(tmp_path):
    policy = _gate(tmp_path, on_timeout="proceed").tick(T0 + minutes(16))
    assert policy.approved and policy.approver == "policy"


def test_timeout_escalates_then_applies_the_policy(tmp_path):
    gate = _gate(tmp_path, escalation={"approvers": ["U0DIRECTOR"], "timeout": "10m"}, on_timeout="escalate")
    assert "U0DIRECTOR" not in gate.asked
    step = gate.tick(T0 + minutes(15))
    assert step == Escalate(("U0DIRECTOR",), T0 + minutes(25))
    assert gate.asked == gate.allowed == {"U0ALICE", "U0BOB", "U0DIRECTOR"}
    assert gate.tick(T0 + minutes(20)) is None
    final = gate.tick(T0 + minutes(25))
    assert not final.approved and "nobody left to escalate to" in final.reason
    assert [s.kind for s in gate.trail] == ["requested", "timed_out", "escalated", "timed_out"]


def test_the_escalation_approver_can_decide_after_escalation(tmp_path):
    gate = _gate(tmp_path, escalation={"approvers": ["U0DIRECTOR"], "timeout": "10m"})
    gate.tick(T0 + minutes(15))
    gate.decide(
        ApprovalDecision(approved=True, reason="go", approver="U0DIRECTOR", via="slack"), T0 + minutes(17)
    )
    assert gate.decision.approver == "U0DIRECTOR"


def test_a_slack_user_off_the_allow_list_is_refused_and_recorded(tmp_path):
    gate = _gate(tmp_path)
    with pytest.raises(PreconditionFailed, match=r"U0MALLORY \(via slack\) is not an approver"):
        gate.decide(ApprovalDecision(approved=True, reason="yolo", approver="U0MALLORY", via="slack"), T0)
    assert not gate.decided and gate.trail[-1].kind == "refused"


def test_a_second_decision_changes_nothing(tmp_path):
    gate = _gate(tmp_path)
    gate.decide(ApprovalDecision(approved=False, reason="flaky alert", approver="U0BOB", via="slack"), T0)
    with pytest.raises(PreconditionFailed, match="already rejected by U0BOB"):
        gate.decide(ApprovalDecision(approved=True, reason="go", approver="U0ALICE", via="slack"), T0)
    assert gate.decision.approver == "U0BOB"


def test_approval_not_required_is_decided_by_policy_at_once(tmp_path):
    rb = make_runbook(tmp_path, required=False, approvers=[])
    gate = ApprovalProcess.from_runbook(rb.approval, T0)
    assert gate.decided and gate.decision.approved and gate.decision.via is Via.policy


def test_the_ui_form_asks_only_the_verdict_and_the_reason():
    from lifeboat_dr.flows.approval_screen import ApprovalForm

    schema = ApprovalForm.model_json_schema()
    assert list(schema["properties"]) == ["approved", "reason"] == schema["required"]
    assert all(p.get("description") for p in schema["properties"].values())


def test_a_verified_login_decides_for_the_approver_it_maps_to(tmp_path):
    gate = _gate(tmp_path)
    gate.decide(
        ApprovalDecision(approved=True, reason="region is down", approver="alice@example.com", via="ui"), T0
    )
    assert gate.trail[-1].who == "alice@example.com (U0ALICE)"


@pytest.mark.parametrize(
    ("approver", "via"),
    [
        ("mallory@example.com", "ui"),  # a login nobody mapped
        ("U0ALICE", "cli"),  # a Slack id typed as a login: logins are another namespace
        ("alice@example.com", "slack"),  # a login claimed as a Slack user id
    ],
)
def test_an_identity_off_the_allow_list_is_refused_on_every_channel(tmp_path, approver, via):
    gate = _gate(tmp_path)
    with pytest.raises(PreconditionFailed, match="is not an approver"):
        gate.decide(ApprovalDecision(approved=True, reason="go", approver=approver, via=via), T0)
    assert not gate.decided and gate.trail[-1].kind == "refused" and gate.trail[-1].who == approver


def test_the_policy_decides_only_at_the_final_deadline(tmp_path):
    gate = _gate(tmp_path, on_timeout="proceed")
    early = ApprovalDecision(approved=True, reason="claimed policy", approver="policy", via="policy")
    with pytest.raises(PreconditionFailed, match="only at the final deadline"):
        gate.decide(early, T0 + minutes(14))
    gate.decide(early, T0 + minutes(15))
    assert gate.decision.via is Via.policy


def test_a_login_for_someone_who_is_not_an_approver_is_a_runbook_error(tmp_path):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="logins: not an approver or escalation approver: U0EVE"):
        make_runbook(tmp_path, logins={"U0EVE": ["eve"]})
