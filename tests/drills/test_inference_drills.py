"""Drill kinds for the inference classes, run for real: toy servers behind HAProxy, a client
process, the serving failover; and a batch job killed mid-way and resumed."""

from pathlib import Path

import pytest

from lifeboat_dr.flows.drills import kinds_for, run_drill
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.loader import load_runbook

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    return tmp_path / "ledger.jsonl"


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["serving-kill", "serving-stale-standby", "serving-degraded"])
def test_serving_drill_passes(kind, tmp_path, ledger):
    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    result = run_drill(rb, kind, failover=None, root=tmp_path)
    assert result.passed, "\n".join(result.lines())
    from lifeboat_dr.core.ledger import LedgerFile

    (entry,) = LedgerFile(ledger).read("chat-serving")
    assert entry.drill and entry.notes["drill"] == kind and entry.client is not None


@pytest.mark.processes
def test_the_degraded_standby_drill_holds_on_the_standby_and_pages_while_the_primary_is_dead(
    tmp_path, ledger
):
    from lifeboat_dr.core.ledger import LedgerFile

    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    result = run_drill(rb, "serving-degraded", failover=None, root=tmp_path)

    assert result.passed, "\n".join(result.lines())
    (entry,) = LedgerFile(ledger).read("chat-serving")
    assert entry.outcome == "held", entry.outcome  # not "reverted" to the primary it just killed
    assert "primary is down by the router's check" in entry.notes["held"], entry.notes
    assert "paged" in entry.notes


def test_batch_resume_drill_proves_exactly_once(tmp_path, ledger):
    rb = load_runbook(ROOT / "runbooks" / "batch-embed.yaml")
    result = run_drill(rb, "batch-resume", failover=None, root=tmp_path)
    assert result.passed, "\n".join(result.lines())
    assert "every output exactly once" in "\n".join(result.lines())


def test_all_means_the_kinds_that_fit_the_workload():
    serving = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    batch = load_runbook(ROOT / "runbooks" / "batch-embed.yaml")
    assert kinds_for("all", serving) == (
        "serving-kill",
        "serving-stale-standby",
        "serving-degraded",
        "serving-rto",
    )
    assert kinds_for("all", batch)[-1] == "batch-resume"
    with pytest.raises(ConfigError, match="does not fit chat-serving"):
        kinds_for("process-kill", serving)
    with pytest.raises(ConfigError, match="does not fit batch-embed"):
        kinds_for("serving-kill", batch)
