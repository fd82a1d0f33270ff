"""Every shipped runbook validates, and its rendered copy next to it is current."""

import json
import os
from pathlib import Path

import pytest

from lifeboat_dr.core.advise import advice_markdown
from lifeboat_dr.flows.wiring import advice_figures
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.runbooks.render import render_markdown
from lifeboat_dr.shell.cli import main
from lifeboat_dr.shell.commands.render import rendered_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "runbooks").glob("*.yaml"))


def test_there_is_one_example_per_workload_class_and_a_demo():
    workloads = {load_runbook(p).workload.value for p in EXAMPLES}
    assert workloads == {"pretraining", "finetuning", "batch-inference", "realtime-inference"}
    assert (ROOT / "runbooks" / "demo.yaml") in EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runbook_validates(path, capsys):
    assert main(["validate", str(path)]) == 0
    assert ": ok (" in capsys.readouterr().out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_rendered_copy_is_current(path):
    rb = load_runbook(path)
    shown = os.path.relpath(path, ROOT)
    copy = rendered_path(path, rb.name)
    assert copy.read_text() == render_markdown(rb, shown, advice_markdown(advice_figures(rb))), (
        f"{copy.name} is stale: run `lifeboat render {shown} --write` from the repository root"
    )


def test_demo_runbook_needs_no_cloud_account():
    rb = load_runbook(ROOT / "runbooks" / "demo.yaml")
    assert rb.primary.store.startswith("file://") and rb.secondary.store.startswith("file://")
    assert rb.secondary.infra == "local" and rb.job.command
    assert rb.store_uri(rb.secondary.store) == f"file://{ROOT / '.lifeboat' / 'demo' / 'secondary'}"


def test_render_shows_manual_commands_for_every_step():
    rb = load_runbook(ROOT / "runbooks" / "llama-70b-pretrain.yaml")
    text = render_markdown(rb, "runbooks/llama-70b-pretrain.yaml", advice_markdown(advice_figures(rb)))
    for heading in ("Detect", "Certify", "Fence", "Approve", "Provision", "Prestage", "Resume", "Verify"):
        assert f". {heading}" in text
    assert "gsutil ls -l -r gs://acme-ckpt-dr-usc1/llama-70b/" in text
    assert "sky launch -c llama-70b-pretrain-dr --infra gcp/us-central1 --gpus H100:8" in text
    assert "| RPO (work you may lose) | 2h | pretraining default |" in text


def test_schema_is_json_schema_with_descriptions(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) >= {"name", "workload", "primary", "secondary", "job", "checkpoint"}
    site = schema["$defs"]["Site"]["properties"]
    assert "SkyPilot infra string" in site["infra"]["description"]
    assert schema["$defs"]["Targets"]["properties"]["rpo"]["anyOf"][0]["examples"] == ["90s", "15m", "2h"]
