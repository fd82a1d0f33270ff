"""`lifeboat drill --kind serving-rto`: the client-visible serving RTO through the deployed path.
Toy servers behind a real HAProxy, an independent client process; the primary is SIGKILLed at
a random point of the watch's schedule; the watch's probes and quorum run every deployed watch
period (`lifeboat deploy`'s, from the runbook's targets or its `cadences.watch`) until they
confirm; then the `failover` flow's serving path with the watch's evidence. The drill passes
only when the client's error window is within the runbook's RTO target."""

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from lifeboat_dr.flows.drills import kinds_for
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main as lifeboat

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.processes


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.chdir(tmp_path)  # the drill's sandbox under .lifeboat/sandbox here
    return tmp_path / "ledger.jsonl"


def _chat_serving(tmp_path, extra: str) -> Path:
    """runbooks/chat-serving.yaml with `extra` YAML appended, its job task beside it."""
    shutil.copytree(ROOT / "runbooks" / "jobs", tmp_path / "jobs")
    path = tmp_path / "chat-serving.yaml"
    path.write_text((ROOT / "runbooks" / "chat-serving.yaml").read_text() + extra)
    return path


def test_the_serving_rto_drill_measures_the_client_window_at_the_deployed_watch_period(
    prefect_server, tmp_path, ledger, capsys
):
    from lifeboat_dr.core.ledger import LedgerFile

    path = _chat_serving(tmp_path, "cadences:\n  watch: 2s\n")
    rc = lifeboat(["drill", str(path), "--kind", "serving-rto"])

    out = capsys.readouterr().out
    assert rc == 0, out
    assert "drill serving-rto: passed" in out, out
    (detection,) = [line for line in out.splitlines() if "the watch confirmed the outage" in line]
    assert (
        "[PASS] the watch confirmed the outage at its deployed period: watch every 2s (runbook's cadences.watch), "
        in detection
    )
    (window,) = [line for line in out.splitlines() if "client-visible error window" in line]
    assert window.startswith("  [PASS] ") and window.endswith("target 10s"), window
    (entry,) = LedgerFile(ledger).read("chat-serving")
    assert entry.drill and entry.notes["drill"] == "serving-rto" and entry.client is not None
    assert entry.outcome == "completed" and entry.phases.get("traffic_switched")
    assert entry.client.window <= timedelta(seconds=10)


def test_the_serving_rto_drill_fails_when_the_client_window_is_over_the_rto(
    prefect_server, tmp_path, ledger, capsys
):
    path = _chat_serving(tmp_path, "cadences:\n  watch: 2s\n")
    path.write_text(
        path.read_text().replace(
            "workload: realtime-inference\n", "workload: realtime-inference\ntargets: {rto: 100ms}\n"
        )
    )  # below any window the drill can measure: the kill lands anywhere in the 2 s watch period, and
    # a detection plus a switch take more (0.72 s seen with a 1 s target, which then passed)
    rc = lifeboat(["drill", str(path), "--kind", "serving-rto"])

    out = capsys.readouterr().out
    assert rc == 1, out
    failed = [line for line in out.splitlines() if line.startswith("  [FAIL] ")]
    assert len(failed) == 1 and "client-visible error window within the RTO target" in failed[0], out
    assert failed[0].endswith("target 100ms"), failed[0]


def test_serving_rto_is_a_drill_of_realtime_serving_runbooks_only():
    assert "serving-rto" in kinds_for("all", load_runbook(ROOT / "runbooks" / "chat-serving.yaml"))
    with pytest.raises(Exception, match="does not fit batch-embed"):
        kinds_for("serving-rto", load_runbook(ROOT / "runbooks" / "batch-embed.yaml"))
