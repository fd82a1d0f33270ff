"""An nccl-hang of the torch job (rank 1 SIGSTOPped under torchrun) recovers at the ladder's
restart rung: the guard stops the job (exit 83) and names rank 1 in its event; the `recover`
flow restarts it on its cluster from the newest committed checkpoint, and the resumed losses
equal an uninterrupted run's exactly."""

import os
import signal
import time
from datetime import UTC, datetime

import pytest
import yaml

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.resume import parse_losses
from lifeboat_dr.flows.recovery import newest_committed, primary_job, recover
from lifeboat_dr.providers.compute.base import JobState, PlanOption
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.providers.orchestrator.fake_events import FileEvents
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.standins.trainer.jobs import TRAINERS, rank_pid
from tests.guard.test_recover_flow import DEMO

TORCH = TRAINERS["torch"]
STEPS, EVERY = 40, 5
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(TORCH.missing() is not None, reason=str(TORCH.missing())),
]


def _until(what, timeout, why):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, why
        time.sleep(0.05)
    return found


def test_an_nccl_hang_recovers_at_the_restart_rung_with_an_uninterrupted_runs_losses(tmp_path, monkeypatch):
    doc = yaml.safe_load(DEMO.read_text())
    doc["primary"]["cluster"] = "demo-primary"
    doc["checkpoint"]["layout"] = "dcp"
    doc["job"]["command"] = TORCH.command(
        steps=STEPS, every=EVERY, step_seconds=0.05, heartbeat=tmp_path / "hb.json"
    )
    doc["job"]["guard"] = {"hang_floor": "2s"}
    doc["recovery"] = {"rungs": [{"rung": "restart", "rto": "150s"}, {"rung": "relaunch-without-node"}]}
    (tmp_path / "rb").mkdir()
    path = tmp_path / "rb" / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    events = FileEvents(tmp_path / "events.jsonl")
    monkeypatch.setenv("LIFEBOAT_GUARD_EVENTS", str(events.path))
    reference = TORCH.start(
        steps=STEPS, every=EVERY, ckpt_dir=tmp_path / "reference", loss_log=tmp_path / "reference-loss.jsonl"
    )

    rb = load_runbook(path)
    compute = LocalCompute(rb.base_dir / ".lifeboat" / "clusters")
    job = primary_job(rb, rb.store_uri(rb.primary.store))
    compute.launch("demo-primary", PlanOption("local", None, None, False, None), job)
    try:
        _until(lambda: max(parse_losses(compute.logs("demo-primary")), default=0) >= 12, 150, "no step 12")
        os.kill(_until(lambda: rank_pid(tmp_path / "hb.json", 1), 10, "no rank 1"), signal.SIGSTOP)
        stopped_at = datetime.now(UTC)  # the outage: each rung's RTO runs from here
        ended = _until(
            lambda: compute.status("demo-primary").job.finished and compute.status("demo-primary"),
            90,
            "no stop",
        )
        assert ended.returncode == 83
        (event,) = events.read(unique=True)
        assert (event["payload"]["kind"], event["payload"]["rank"]) == ("hang", 1)
        uri, step = newest_committed(rb)
        assert step == event["payload"]["last_committed"]

        out = recover.fn(str(path), event["id"], event["payload"], occurred=stopped_at)

        assert (out["outcome"], out["recovered_by"]) == ("completed", "restart"), out
        _until(
            lambda: compute.status("demo-primary").job is not JobState.RUNNING, 150, "the restart did not end"
        )
        assert compute.status("demo-primary").returncode == 0
        resumed = parse_losses(compute.logs("demo-primary"))
        assert reference.wait(timeout=150) == 0
        uninterrupted = parse_losses((tmp_path / "reference-loss.jsonl").read_text())
        assert min(resumed) == step + 1 and max(resumed) == STEPS
        assert {s: resumed[s] for s in resumed} == {s: uninterrupted[s] for s in resumed}  # bit for bit
        entry = LedgerFile(tmp_path / "ledger.jsonl").entry("demo", f"recovery-{event['id']}.restart")
        assert entry.notes["checkpoint"] == uri and entry.rto is not None
        print(
            f"restart rung: RTO {entry.rto.total_seconds():.1f}s from the SIGSTOP, resumed from step {step}"
        )
    finally:
        reference.kill()
        for cluster in compute.clusters():
            compute.teardown(cluster)
