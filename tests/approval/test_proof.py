"""Signed decisions: only a front door that verified the person can speak for a run."""

from datetime import timedelta

import pytest

from lifeboat_dr.core.approval_proof import Unverified, sign_decision, verify_signed
from lifeboat_dr.providers.chat.base import ApprovalDecision

from .conftest import T0

KEY = b"k" * 32
RUN = "8d4c1a52-0000-4000-8000-000000000001"
ALICE = ApprovalDecision(approved=True, reason="region down", approver="alice@example.com", via="ui")


def test_a_signed_decision_verifies_for_its_run_and_says_who():
    d = verify_signed(KEY, RUN, sign_decision(KEY, RUN, ALICE, T0), T0 + timedelta(seconds=5))
    assert (d.approved, d.approver, d.via) == (True, "alice@example.com", "ui")


def test_a_bare_rest_resume_claiming_slack_is_unverified():
    forged = {"approved": True, "reason": "x", "approver": "U0ALICE", "via": "slack"}
    with pytest.raises(Unverified, match="not signed"):
        verify_signed(KEY, RUN, forged, T0)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s | {"approved": False},
        lambda s: s | {"approver": "U0BOB"},
        lambda s: s | {"via": "cli"},
        lambda s: s | {"reason": "something else"},
        lambda s: s | {"signature": "0" * 64},
    ],
)
def test_an_altered_signed_decision_is_unverified(tamper):
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(KEY, RUN, tamper(sign_decision(KEY, RUN, ALICE, T0)), T0)


def test_a_decision_signed_for_another_run_or_with_another_key_is_unverified():
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(KEY, RUN, sign_decision(KEY, "another-run", ALICE, T0), T0)
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(KEY, RUN, sign_decision(b"attacker-key", RUN, ALICE, T0), T0)


def test_an_old_signed_decision_is_a_replay():
    with pytest.raises(Unverified, match="replay"):
        verify_signed(KEY, RUN, sign_decision(KEY, RUN, ALICE, T0), T0 + timedelta(minutes=11))


def test_the_policy_and_the_console_cannot_be_claimed_by_a_signature():
    signed = sign_decision(KEY, RUN, ALICE.model_copy(update={"via": "policy"}), T0)
    with pytest.raises(Unverified, match="not a channel"):
        verify_signed(KEY, RUN, signed, T0)


def test_without_a_key_nothing_is_verified_and_nothing_is_signed():
    with pytest.raises(Unverified, match="no approval signing key"):
        verify_signed(None, RUN, sign_decision(KEY, RUN, ALICE, T0), T0)
    with pytest.raises(Exception, match="no approval signing key"):
        sign_decision(b"", RUN, ALICE, T0)


def test_hostile_shapes_are_unverified_not_tracebacks():
    for junk in ({"signature": 1, "signed_at": "x"}, {"signature": "a", "signed_at": "b", "approver": ["x"]}):
        with pytest.raises(Unverified):
            verify_signed(KEY, RUN, junk, T0)
    signed = sign_decision(KEY, RUN, ALICE, T0) | {"signed_at": "not a time"}
    with pytest.raises(Unverified):
        verify_signed(KEY, RUN, signed, T0)
