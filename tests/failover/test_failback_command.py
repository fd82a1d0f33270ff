"""`lifeboat failback` on a runbook that never failed over: one clear line, nothing changed."""

from pathlib import Path

import pytest

from flows.sandbox import sandboxed
from lifeboat.fencing import read_lease
from runbooks.loader import load_runbook
from shell.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_failback_with_the_primary_still_active_stops_in_one_line(
    prefect_server, tmp_path, capsys, monkeypatch
):
    import yaml

    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "failback-cmd", root=tmp_path)
    rb.path.write_text(yaml.safe_dump(rb.model_dump(mode="json")))
    primary_lease = read_lease(_store(rb.primary.store))

    assert main(["failback", str(rb.path), "--approval", "approve"]) == 1

    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lifeboat failback")]
    assert len(err) == 1 and "nothing to fail back: primary is active (epoch 0)" in err[0], err
    assert read_lease(_store(rb.primary.store)) == primary_lease  # no fence, no epoch bump


def _store(uri):
    from providers.storage import open_store

    return open_store(uri)
