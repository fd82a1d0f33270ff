"""The `recover` flow over the demo's real pieces: the stand-in trainer as a local process
group, its file:// stores, the ledger file. A killed job recovers at the restart rung, on the
same cluster, from its newest committed checkpoint, its first step after it logged."""

import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.resume import parse_losses
from lifeboat_dr.flows.recovery import newest_committed, primary_job, recover
from lifeboat_dr.flows.wiring import open_site
from lifeboat_dr.providers.compute.base import JobState, PlanOption
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.runbooks.loader import load_runbook

DEMO = Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml"
TRAIN = "python -m lifeboat_dr.standins.trainer --steps 2000 --every 5 --step-seconds 0.02"

pytestmark = pytest.mark.processes


@pytest.fixture
def runbook(tmp_path, monkeypatch):
    doc = yaml.safe_load(DEMO.read_text())
    doc["primary"]["cluster"] = "demo-primary"
    doc["job"]["command"] = TRAIN
    doc["recovery"] = {"rungs": [{"rung": "restart", "rto": "60s"}, {"rung": "relaunch-without-node"}]}
    (tmp_path / "rb").mkdir()
    path = tmp_path / "rb" / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    return path


def _until(what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def test_a_killed_job_recovers_at_the_restart_rung_from_its_newest_committed_checkpoint(runbook, tmp_path):
    rb = load_runbook(runbook)
    compute = LocalCompute(rb.base_dir / ".lifeboat" / "clusters")
    home = rb.store_uri(rb.primary.store)
    compute.launch("demo-primary", PlanOption("local", None, None, False, None), primary_job(rb, home))
    try:
        _until(lambda: len(committed_checkpoints(open_site(rb, rb.primary), "manifest")) >= 2)
        pid = compute._state("demo-primary")["pid"]
        os.killpg(pid, signal.SIGKILL)  # the job dies as the guard's exit would end it
        _until(lambda: compute.status("demo-primary").job is JobState.FAILED, 10)
        uri, step = newest_committed(rb)

        out = recover.fn(
            str(runbook), "ev-7", {"kind": "hang", "host": "node-1", "rank": 1, "step": step + 3}
        )

        assert (out["outcome"], out["recovered_by"]) == ("completed", "restart")
        restart = LedgerFile(tmp_path / "ledger.jsonl").entry("demo", "recovery-ev-7.restart")
        assert restart.notes["cluster"] == "demo-primary" and restart.notes["checkpoint"] == uri
        assert restart.rto is not None and restart.rto.total_seconds() == pytest.approx(out["rto_s"])
        resumed = parse_losses(compute.logs("demo-primary"))
        assert resumed and min(resumed) > step  # it resumed: its first step is after the checkpoint's
        started = compute._state("demo-primary")["started_at"]
        assert recover.fn(str(runbook), "ev-7", {"kind": "hang"})["run_id"] == "recovery-ev-7"  # twice: once
        assert compute._state("demo-primary")["started_at"] == started  # not restarted again
        assert compute.clusters() == ["demo-primary"]
    finally:
        for cluster in compute.clusters():
            compute.teardown(cluster)
