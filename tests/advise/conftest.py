"""Fixtures for `lifeboat advise`: a runbook with a `cluster:` section, and the CLI in-process."""

from __future__ import annotations

import copy

import pytest

from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.shell import cli

BASE_RUNBOOK = {
    "name": "llm-pretrain",
    "workload": "pretraining",
    "primary": {"infra": "local", "store": "file:///data/primary"},
    "secondary": {"infra": "local", "store": "file:///data/secondary", "candidates": [{"infra": "local"}]},
    "job": {"command": "python train.py"},
    "checkpoint": {"cadence": "4h", "retention": {"keep_last": 2}},
    "cluster": {
        "gpus": 1024,
        "gpu_hour_usd": 3.80,
        "mtbf": "7.9h",
        "checkpoint_write": "5m",
        "restart": "10m",
        "checkpoint_size_gb": 2000,
        "storage_usd_per_gb_month": 0.023,
        "transfer_usd_per_gb": 0.02,
        "standby": "warm",
        "provision": "8m",
    },
}


@pytest.fixture
def runbook_data() -> dict:
    """A fresh, valid runbook document to edit per test."""
    return copy.deepcopy(BASE_RUNBOOK)


@pytest.fixture
def make_runbook():
    def make(data: dict) -> Runbook:
        return Runbook.model_validate(data)

    return make


@pytest.fixture
def lifeboat(monkeypatch, capsys):
    """Run `lifeboat advise ...` through the real `cli.main`; returns (exit code, stdout, stderr).

    Only the advise command is registered, so the test does not depend on other commands.
    """

    def run(*argv: str) -> tuple[int, str, str]:
        rc = cli.main(list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run
