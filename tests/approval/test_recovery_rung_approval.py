"""A recovery rung set to `approval: wait` asks a person through the same gate as a failover:
the `recover` flow pauses, an unsigned resume is refused, and only a decision signed by
`lifeboat serve` for this run's `recovery` ask lets the rung act."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.recovery import newest_committed, primary_job, recover
from lifeboat_dr.flows.wiring import open_site
from lifeboat_dr.providers.compute.base import JobState, PlanOption
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.runbooks.loader import load_runbook

from .conftest import in_thread, wait_until
from .test_prefect_approval import _paused_run_ids, _proxied

DEMO = Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml"
TRAIN = "python -m lifeboat_dr.standins.trainer --steps 2000 --every 5 --step-seconds 0.02"

pytestmark = [pytest.mark.integration, pytest.mark.processes]


def test_a_rung_that_waits_for_a_person_acts_only_on_a_signed_decision(
    tmp_path, prefect_server, approval_keys, monkeypatch
):
    from prefect.client.orchestration import get_client

    doc = yaml.safe_load(DEMO.read_text())
    doc["primary"]["cluster"] = "demo-primary"
    doc["job"]["command"] = TRAIN
    doc["recovery"] = {"rungs": [{"rung": "restart", "approval": "wait", "rto": "60s"}]}
    (tmp_path / "rb").mkdir()
    path = tmp_path / "rb" / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    rb = load_runbook(path)
    compute = LocalCompute(rb.base_dir / ".lifeboat" / "clusters")
    compute.launch(
        "demo-primary",
        PlanOption("local", None, None, False, None),
        primary_job(rb, rb.store_uri(rb.primary.store)),
    )
    try:
        wait_until(lambda: len(committed_checkpoints(open_site(rb, rb.primary), "manifest")) >= 2)
        os.killpg(compute._state("demo-primary")["pid"], signal.SIGKILL)
        wait_until(lambda: compute.status("demo-primary").job is JobState.FAILED, 10)
        _, step = newest_committed(rb)
        others = set(_paused_run_ids())
        t = in_thread(
            recover, str(path), "ev-9", {"kind": "hang", "host": "node-1", "rank": 1, "step": step + 2}
        )
        (run_id,) = wait_until(lambda: [r for r in _paused_run_ids() if r not in others])
        started = compute._state("demo-primary").get("started_at")

        with get_client(sync_client=True) as client:  # whoever reaches Prefect's API, unsigned
            before = client.read_flow_run(run_id).state.id
            with contextlib.suppress(Exception):  # refused by Prefect itself: as good a no
                client.resume_flow_run(
                    run_id, run_input={"approved": True, "reason": "me", "approver": "U0DEMOONCALL"}
                )
            if client.read_flow_run(run_id).state.id != before:  # it reached the gate: paused again
                wait_until(lambda: (st := client.read_flow_run(run_id).state).is_paused() and st.id != before)
        assert compute._state("demo-primary").get("started_at") == started  # the rung did not act

        answer = _proxied(approval_keys, run_id, "oncall", reason="restart it in place")
        assert answer.is_success, answer.text
        t.join(120)
        assert "error" not in t.out, t.out.get("error")
        assert (t.out["value"]["outcome"], t.out["value"]["recovered_by"]) == ("completed", "restart")
        rung = LedgerFile(tmp_path / "ledger.jsonl").entry("demo", "recovery-ev-9.restart")
        assert {"approval_requested", "approval_granted", "provisioned", "first_step"} <= set(rung.phases)
        assert compute._state("demo-primary")["started_at"] != started  # the rung acted after the decision
    finally:
        for cluster in compute.clusters():
            compute.teardown(cluster)
