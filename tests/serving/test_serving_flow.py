"""The `failover` flow on a realtime-serving runbook: the serving path, on a real Prefect server."""

import shutil
import time
from pathlib import Path

import pytest

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.failover import failover

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_of_a_serving_runbook_verifies_the_standby_and_moves_traffic(prefect_server, ledger_path):
    result = failover(str(ROOT / "runbooks" / "chat-serving.yaml"), dry_run=True)

    assert result["outcome"] == "completed", result["failures"]
    assert 0 < result["rto_s"] < 10
    assert Path(result["timeline"]).stat().st_size > 10_000
    (entry,) = LedgerFile(ledger_path).read("chat-serving")
    assert entry.table == "serving" and entry.drill
    assert {"confirmed", "standby_verified", "traffic_switched", "watch_passed"} <= set(entry.phases)
    assert entry.notes["weights_digest"].startswith("sha256:")


def test_a_serving_runbook_that_requires_approval_asks_on_the_flow_and_a_no_moves_nothing(
    prefect_server, ledger_path, tmp_path
):
    import yaml

    doc = yaml.safe_load((ROOT / "runbooks" / "chat-serving.yaml").read_text())
    doc["approval"] = {"required": True, "approvers": ["U0ONCALL"], "timeout": "1m"}
    (tmp_path / "jobs").mkdir()  # the task beside the runbook: a task file lies in the runbook's repository
    shutil.copy(ROOT / "runbooks" / doc["job"]["task"], tmp_path / doc["job"]["task"])
    path = tmp_path / "chat-serving.yaml"
    path.write_text(yaml.safe_dump(doc))

    result = failover(str(path), dry_run=True, approval="reject")

    assert result["outcome"] == "aborted"
    (entry,) = LedgerFile(ledger_path).read("chat-serving")
    assert "standby_verified" in entry.phases and "approval_requested" in entry.phases
    assert "traffic_switched" not in entry.phases


@pytest.mark.processes
def test_a_real_serving_failover_confirms_a_dead_primary_by_endpoint_and_router_health(
    prefect_server, ledger_path, tmp_path
):
    from prefect import flow

    from lifeboat_dr.flows.serving import serve_failover
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.wiring import build_router
    from lifeboat_dr.kernel.errors import StopFailover
    from lifeboat_dr.runbooks.loader import load_runbook

    @flow
    def real_failover(rb, run_id):  # not a dry run: no evidence handed over, the quorum decides now
        return serve_failover(
            rb, run_id=run_id, outage_started_at=None, detected_at=None, evidence=None,
            force=False, approval=None, dry_run=False,
        )  # fmt: skip

    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    with serving_sandbox(rb, tmp_path / "box") as box:
        router = build_router(box.rb)
        with pytest.raises(StopFailover, match="outage not confirmed"):  # the primary is alive
            real_failover(box.rb, "alive")
        assert router.weights() == {"primary": 255, "secondary": 0}

        box.kill_primary()
        deadline = time.monotonic() + 30  # HAProxy marks it down after its checks fail (fall x inter),
        while router.health()["primary"].state != "down":  # as the watch's next ticks would see
            assert time.monotonic() < deadline, "HAProxy never marked the killed primary down"
            time.sleep(0.1)
        result = real_failover(box.rb, "dead")

        assert result["outcome"] == "completed", result["failures"]
        assert router.weights() == {"primary": 0, "secondary": 255}
    entry = next(e for e in LedgerFile(ledger_path).read("chat-serving") if e.run_id == "dead")
    assert "endpoint_health:" in entry.notes["evidence"] and "router_health:" in entry.notes["evidence"]
