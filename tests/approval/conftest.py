from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runbooks.model import Runbook

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def make_runbook(tmp_path, **approval) -> Runbook:
    return Runbook.model_validate(
        {
            "name": "llama-pretrain",
            "workload": "pretraining",
            "primary": {"infra": "local", "store": f"file://{tmp_path}/primary"},
            "secondary": {
                "infra": "local",
                "store": f"file://{tmp_path}/secondary",
                "candidates": [{"infra": "local"}],
            },
            "job": {"command": "python train.py"},
            "checkpoint": {"cadence": "10m"},
            "approval": {
                "required": True,
                "approvers": ["U0ALICE", "U0BOB"],
                "channel": "C0INCIDENT",
                "timeout": "15m",
                **approval,
            },
        }
    )


@pytest.fixture
def runbook(tmp_path):
    return make_runbook(tmp_path)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)
