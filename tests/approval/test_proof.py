"""Signed decisions: only a front door that verified the person can speak for a run, and only
to what its gate asks (run, runbook, action, epoch). Workers hold public keys only."""

import hashlib
import hmac
import json
import os
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lifeboat_dr.core.approval_keys import (
    generate,
    load_signing_key,
    parse_public_keys,
    public_keys,
    public_text,
)
from lifeboat_dr.core.approval_proof import Ask, Unverified, sign_decision, verify_signed
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.chat.base import ApprovalDecision

from .conftest import T0

KEY = Ed25519PrivateKey.generate()
PUBLIC = (KEY.public_key(),)
RUN = "8d4c1a52-0000-4000-8000-000000000001"
ASK = Ask(RUN, "llama-pretrain", "failover", 7)
ALICE = ApprovalDecision(approved=True, reason="region down", approver="alice@example.com", via="ui")


def test_a_signed_decision_verifies_for_its_ask_and_says_who():
    d = verify_signed(PUBLIC, ASK, sign_decision(KEY, ASK, ALICE, T0), T0 + timedelta(seconds=5))
    assert (d.approved, d.approver, d.via) == (True, "alice@example.com", "ui")


def test_a_bare_rest_resume_claiming_slack_is_unverified():
    forged = {"approved": True, "reason": "x", "approver": "U0ALICE", "via": "slack"}
    with pytest.raises(Unverified, match="not signed"):
        verify_signed(PUBLIC, ASK, forged, T0)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s | {"approved": False},
        lambda s: s | {"approver": "U0BOB"},
        lambda s: s | {"via": "cli"},
        lambda s: s | {"reason": "something else"},
        lambda s: s | {"signed_at": "2026-11-30T08:00:01+00:00"},
        lambda s: s | {"signature": s["signature"][:-4] + "AAA="},
        lambda s: s | {"signature": "not base64!"},
    ],
)
def test_an_altered_signed_decision_is_unverified(tamper):
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(PUBLIC, ASK, tamper(sign_decision(KEY, ASK, ALICE, T0)), T0)


@pytest.mark.parametrize(
    "other",
    [
        Ask("8d4c1a52-0000-4000-8000-00000000beef", "llama-pretrain", "failover", 7),
        Ask(RUN, "another-runbook", "failover", 7),
        Ask(RUN, "llama-pretrain", "failback", 7),
        Ask(RUN, "llama-pretrain", "serving", 7),
        Ask(RUN, "llama-pretrain", "failover", 8),
    ],
    ids=["another-run", "another-runbook", "failback", "serving", "a later epoch"],
)
def test_a_decision_signed_for_another_question_is_unverified(other):
    with pytest.raises(Unverified, match="bad signature|signed for"):
        verify_signed(PUBLIC, ASK, sign_decision(KEY, other, ALICE, T0), T0)
    stripped = {
        k: v
        for k, v in sign_decision(KEY, other, ALICE, T0).items()
        if k not in ("runbook", "action", "epoch")
    }
    with pytest.raises(Unverified, match="bad signature"):  # the claims dropped: the signature still says
        verify_signed(PUBLIC, ASK, stripped, T0)


def test_another_key_cannot_sign_and_rotation_accepts_two():
    with pytest.raises(Unverified, match="bad signature"):
        verify_signed(PUBLIC, ASK, sign_decision(Ed25519PrivateKey.generate(), ASK, ALICE, T0), T0)
    new = Ed25519PrivateKey.generate()
    both = (KEY.public_key(), new.public_key())
    for key in (KEY, new):  # during a rotation, either signing key is accepted
        assert (
            verify_signed(both, ASK, sign_decision(key, ASK, ALICE, T0), T0).approver == "alice@example.com"
        )


def test_an_old_signed_decision_is_a_replay():
    with pytest.raises(Unverified, match="replay"):
        verify_signed(PUBLIC, ASK, sign_decision(KEY, ASK, ALICE, T0), T0 + timedelta(minutes=11))


def test_the_policy_and_the_console_cannot_be_claimed_by_a_signature():
    for via in ("policy", "console", "prefect"):
        signed = sign_decision(KEY, ASK, ALICE.model_copy(update={"via": via}), T0)
        with pytest.raises(Unverified, match="not a channel"):
            verify_signed(PUBLIC, ASK, signed, T0)


def test_without_a_public_key_nothing_is_verified():
    with pytest.raises(Unverified, match="no approval public key"):
        verify_signed((), ASK, sign_decision(KEY, ASK, ALICE, T0), T0)


def test_hostile_shapes_are_unverified_not_tracebacks():
    for junk in ({"signature": 1, "signed_at": "x"}, {"signature": "a", "signed_at": "b", "approver": ["x"]}):
        with pytest.raises(Unverified):
            verify_signed(PUBLIC, ASK, junk, T0)
    signed = sign_decision(KEY, ASK, ALICE, T0) | {"signed_at": "not a time"}
    with pytest.raises(Unverified):
        verify_signed(PUBLIC, ASK, signed, T0)


def test_whatever_a_worker_holds_cannot_sign(tmp_path):
    """A worker fully compromised: it has the public keys (env) and everything the old scheme
    used (an HMAC over the decision with any value it holds). None of it signs."""
    public = public_text(KEY.public_key())
    held = [
        public,
        public.removeprefix("ed25519:"),
        "test-approval-key",
        os.environ.get("PREFECT_API_AUTH_STRING", ""),
    ]
    for material in held:
        message = json.dumps(
            [RUN, True, "go", "alice@example.com", "ui", T0.isoformat()], separators=(",", ":")
        )
        forged = {
            "approved": True, "reason": "go", "approver": "alice@example.com", "via": "ui",
            "signed_at": T0.isoformat(timespec="seconds"),
            "signature": hmac.new(material.encode(), message.encode(), hashlib.sha256).hexdigest(),
        }  # fmt: skip
        with pytest.raises(Unverified, match="bad signature"):
            verify_signed(PUBLIC, ASK, forged, T0)
        seed = hashlib.sha256(material.encode()).digest()  # a private key made from what it holds
        with pytest.raises(Unverified, match="bad signature"):
            verify_signed(
                PUBLIC, ASK, sign_decision(Ed25519PrivateKey.from_private_bytes(seed), ASK, ALICE, T0), T0
            )


def test_keys_generate_0600_never_overwrite_and_refuse_loose_modes(tmp_path):
    path = tmp_path / "signing.pem"
    public = generate(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_signing_key(path).public_key().public_bytes_raw() == public.public_bytes_raw()
    with pytest.raises(ConfigError, match="never overwritten"):
        generate(path)
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="readable by others"):
        load_signing_key(path)


def test_public_keys_are_read_strictly():
    one, two, three = (public_text(Ed25519PrivateKey.generate().public_key()) for _ in range(3))
    assert len(public_keys({"LIFEBOAT_APPROVAL_PUBLIC_KEYS": f"{one}, {two}"})) == 2
    assert public_keys({}) == ()
    with pytest.raises(ConfigError, match="at most 2"):
        parse_public_keys(f"{one} {two} {three}")
    with pytest.raises(ConfigError, match="entry 2 is not an Ed25519 public key"):
        parse_public_keys(f"{one} ed25519:bm90LWEta2V5")
    with pytest.raises(ConfigError, match="entry 1"):
        parse_public_keys("test-approval-key-shared-by-the-flow-and-the-front-doors")


def test_serve_refuses_the_retired_shared_key(monkeypatch):
    from lifeboat_dr.core.approval_keys import signing_key

    with pytest.raises(ConfigError, match="no longer used"):
        signing_key({"LIFEBOAT_APPROVAL_KEY": "shared"})
    with pytest.raises(ConfigError, match="LIFEBOAT_APPROVAL_SIGNING_KEY_FILE"):
        signing_key({})


def test_a_fifo_or_a_device_is_not_read_as_a_key(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        public_keys({"LIFEBOAT_APPROVAL_PUBLIC_KEYS_FILE": str(fifo)})
    with pytest.raises(ConfigError, match="not a regular file"):
        public_keys({"LIFEBOAT_APPROVAL_PUBLIC_KEYS_FILE": "/dev/zero"})


def test_a_failovers_card_asks_failover_or_failback_at_the_epoch_confirmed():
    from types import SimpleNamespace as NS

    from lifeboat_dr.core.failover.card import asked

    assert asked(NS(spec=NS(activates="secondary"), expected_epoch=4)) == ("failover", 4)
    assert asked(NS(spec=NS(activates="primary"), expected_epoch=5)) == ("failback", 5)
    assert asked(object()) == ("failover", None)  # scripted steps in tests keep no epoch
    assert asked(NS(spec=lambda: None, expected_epoch=lambda: 3)) == ("failover", None)  # a proxy
