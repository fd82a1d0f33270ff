"""`make demo DEMO_ARGS=--fleet` after the plan: the fleet failover in dry run on a temporary
Prefect server, each placed job's own failover completed, the waiting ones left alone."""

import re

import pytest

from lifeboat_dr.demo import training as demo

pytestmark = [pytest.mark.integration, pytest.mark.processes, pytest.mark.timeout(600)]


def test_fleet_demo_rehearses_the_fleet_failover_of_the_plan(monkeypatch, capsys):
    monkeypatch.chdir(demo.ROOT)
    monkeypatch.delenv("LIFEBOAT_LEDGER", raising=False)

    assert demo.main(["--fleet"]) == 0

    out = capsys.readouterr().out
    jobs = dict(
        re.findall(r"^\[lifeboat fleet demo\]   ([\w-]+): (completed|waiting|failed|not run)", out, re.M)
    )
    assert jobs == {
        "chat-serving": "completed",
        "llama-70b-pretrain": "completed",
        "llama-8b-pretrain": "completed",
        "mistral-7b-dpo": "waiting",
        "mistral-7b-sft": "completed",
        "batch-embed": "waiting",
    }
    assert "approved by console via console" in out and "demo passed" in out
