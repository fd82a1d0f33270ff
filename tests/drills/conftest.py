"""Drills run in a scratch working directory: sandboxes, ledger and timelines land there."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "runbooks" / "demo.yaml"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # jobs the drills start run this tree's code
    return tmp_path
