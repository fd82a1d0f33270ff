"""`lifeboat fleet-failover`: the flow from a terminal, as the other commands run theirs: the
fleet's entry as JSON, one-line errors, exit 1 when the fleet could not plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lifeboat_dr.shell.cli import main as lifeboat
from tests.fleet.test_fleet_failover_flow import three_runbooks


def test_a_runbook_that_does_not_load_is_one_line_before_any_run(tmp_path, capsys):
    assert lifeboat(["fleet-failover", str(tmp_path / "missing.yaml"), "--dry-run"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lifeboat fleet-failover: ") and "missing.yaml" in err[0]


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_fleet_dry_run_from_the_cli_prints_the_fleets_entry_and_refuses_a_runbook_twice(
    prefect_server, tmp_path, ledger_path, capsys
):
    runbooks = three_runbooks(tmp_path)
    assert lifeboat(["fleet-failover", *runbooks, "--dry-run", "--recovery", "4h", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state"] == "COMPLETED" and doc["fleet"].startswith("fleet-")
    assert [j["outcome"] for j in doc["jobs"]] == ["completed", "completed", "waiting"]

    again = tmp_path / "again.yaml"
    again.write_text(Path(runbooks[0]).read_text())
    assert lifeboat(["fleet-failover", runbooks[0], str(again), "--dry-run"]) == 1
    out = capsys.readouterr()
    assert out.err.strip().splitlines()[-1] == "lifeboat fleet-failover: runbook(s) given twice: pretrain-a"
