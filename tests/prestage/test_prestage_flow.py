"""The prestage flow on a real (temporary) Prefect server."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_prestage_flow_stages_weights_and_reports_ready(tmp_path, prefect_server):
    from lifeboat_dr.flows.prestage import prestage

    weights = tmp_path / "hub" / "tokenizer"
    weights.mkdir(parents=True)
    (weights / "tokenizer.json").write_bytes(b"{}")
    runbook = tmp_path / "rb.yaml"
    runbook.write_text(
        yaml.safe_dump(
            {
                "name": "warm",
                "workload": "finetuning",
                "primary": {"infra": "local", "store": "file://primary"},
                "secondary": {
                    "infra": "local",
                    "store": "file://secondary",
                    "candidates": [{"infra": "local"}],
                },
                "job": {"command": "true"},
                "checkpoint": {"cadence": "10m"},
                "prestage": {"weights": [f"file://{weights}"]},
            }
        )
    )
    result = prestage(str(runbook))
    assert result["ready"] and result["items"] == [
        f"weights file://{weights}: 1/1 objects staged in file://{tmp_path / 'secondary'}/prestage/{str(weights).strip('/')}"
    ]


def test_prefect_yaml_schedules_the_prestage_deployment():
    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    (dep,) = [d for d in doc["deployments"] if d["entrypoint"] == "lifeboat_dr.flows.prestage:prestage"]
    from lifeboat_dr.flows.deploy import RUNBOOK_PLACEHOLDER

    assert dep["schedules"] and dep["parameters"]["runbook"] == RUNBOOK_PLACEHOLDER
