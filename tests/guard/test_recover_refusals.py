"""A `recover` run that must act on nothing fails in one line: a hostile event id, a runbook
whose job runs on the secondary since a failover (the ladder acts on the primary's cluster)."""

from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.recovery import recover
from lifeboat_dr.flows.wiring import open_sites
from lifeboat_dr.kernel.errors import ConfigError, StopFailover
from lifeboat_dr.runbooks.loader import load_runbook

DEMO = Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml"


def test_a_hostile_event_id_fails_the_run_in_one_line_before_anything_is_read(tmp_path):
    with pytest.raises(ConfigError, match=r"^event id '\.\./x'"):
        recover.fn(str(tmp_path / "no-such-runbook.yaml"), "../x", {"kind": "hang"})


def test_after_a_failover_the_primarys_ladder_acts_on_nothing(tmp_path, monkeypatch):
    doc = yaml.safe_load(DEMO.read_text())
    doc["primary"]["cluster"] = "demo-primary"
    doc["recovery"] = {"rungs": [{"rung": "restart"}]}
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    primary, secondary = open_sites(load_runbook(path))
    fence_job(secondary, primary, run_id="fo-1", holder="secondary", runbook="demo")

    with pytest.raises(StopFailover, match="the secondary is active .*nothing done"):
        recover.fn(str(path), "ev-9", {"kind": "hang", "host": "node-1", "rank": 0})

    assert LedgerFile(tmp_path / "ledger.jsonl").read("demo") == []
    assert not (tmp_path / ".lifeboat" / "clusters").exists()  # no rung touched the compute
