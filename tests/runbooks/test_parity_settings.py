"""`validate` says when a training runbook proves nothing after a failover (issue #29)."""

from pathlib import Path

import yaml

from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _demo_with(tmp_path, **verify) -> Path:
    doc = yaml.safe_load((ROOT / "runbooks" / "demo.yaml").read_text())
    doc["verify"] = {**doc["verify"], **verify}
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_warns_on_parity_steps_0_for_a_training_runbook(tmp_path, capsys):
    path = _demo_with(tmp_path, parity_steps=0)
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"{path}: warning: verify.parity_steps is 0 on a finetuning runbook" in err


def test_validate_is_quiet_about_parity_on_an_inference_runbook(capsys):
    assert main(["validate", str(ROOT / "runbooks" / "batch-embed.yaml")]) == 0
    assert "parity_steps" not in capsys.readouterr().err


def test_minimum_coverage_has_a_described_default(tmp_path):
    rb = load_runbook(_demo_with(tmp_path))
    assert rb.verify.parity_min_coverage == 0.5
    assert load_runbook(_demo_with(tmp_path, parity_min_coverage=1)).verify.parity_min_coverage == 1
