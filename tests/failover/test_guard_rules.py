"""The guard's rules, over the shipped runbooks: which parameters may decide for a person,
and what counts as a sandbox (the flows under attack: test_acting_guard.py)."""

from __future__ import annotations

import pytest

from lifeboat_dr.flows.guard import console_mode, on_this_machine
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.loader import load_runbook


@pytest.fixture(scope="module")
def shipped():
    return {
        name: load_runbook(name) for name in ("demo", "llama-70b-pretrain", "chat-serving", "demo-serving")
    }


@pytest.mark.parametrize("name", ["llama-70b-pretrain", "chat-serving", "demo-serving"])
def test_approve_is_refused_where_a_run_would_act_off_this_machine_or_move_traffic(shipped, name):
    with pytest.raises(ConfigError, match="approval=approve decides without a person"):
        console_mode(shipped[name], "approve", rehearsal=False)


def test_approve_decides_only_in_a_rehearsal_or_on_a_runbook_that_is_all_on_this_machine(shipped):
    assert console_mode(shipped["demo"], "approve", rehearsal=False) == "approve"
    assert console_mode(shipped["llama-70b-pretrain"], "approve", rehearsal=True) == "approve"


@pytest.mark.parametrize("approval, mode", [(None, "wait"), ("wait", "wait"), ("reject", "reject")])
def test_waiting_and_refusing_are_always_allowed(shipped, approval, mode):
    assert console_mode(shipped["llama-70b-pretrain"], approval, rehearsal=False) == mode


def test_on_this_machine_is_what_a_runbook_names_not_what_a_parameter_says(shipped):
    assert on_this_machine(shipped["demo"])
    assert not any(
        on_this_machine(shipped[n]) for n in ("llama-70b-pretrain", "chat-serving", "demo-serving")
    )
