"""One serving walk: a serving drill rehearses the walk the `failover` flow runs in production,
step for step from the one serving table (`core/serving/steps.py`); the flow only runs each
step as a task run."""

from pathlib import Path

import pytest

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.serving.steps import SERVING_STEPS
from lifeboat_dr.flows.drills import run_drill
from lifeboat_dr.flows.failover import failover
from lifeboat_dr.runbooks.loader import load_runbook
from tests.failover.test_prefect_runner import _task_runs

pytestmark = pytest.mark.integration

RUNBOOK = Path(__file__).resolve().parents[2] / "runbooks" / "chat-serving.yaml"
CALLS = [s.name for s in SERVING_STEPS if s.name not in ("detect", "approval")]  # confirm: the quorum
MILESTONES = ["outage_start", *(s.milestone for s in SERVING_STEPS if s.name != "approval")]


@pytest.fixture
def walked(monkeypatch):
    """Each step the core's serving walk ran, with the runner it ran on."""
    from lifeboat_dr.core.serving import failover as serving

    seen, real = [], serving.run_step

    def spy(runner, name, call, *args, timeout_s):
        seen.append((type(runner).__name__, name))
        return real(runner, name, call, *args, timeout_s=timeout_s)

    monkeypatch.setattr(serving, "run_step", spy)
    return seen


def test_a_serving_drill_walks_the_same_steps_as_the_failover_flow(
    prefect_server, walked, tmp_path, monkeypatch
):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(ledger))
    monkeypatch.chdir(tmp_path)

    drill = run_drill(load_runbook(RUNBOOK), "serving-kill", failover=None, root=tmp_path / "drills")
    assert drill.passed, "\n".join(drill.lines())
    drilled = walked[:]
    walked.clear()
    result = failover(str(RUNBOOK), dry_run=True)
    assert result["outcome"] == "completed", result["failures"]

    assert drilled == [("ThreadRunner", name) for name in CALLS]
    assert walked == [("PrefectRunner", name) for name in CALLS]
    entries = {e.run_id: e for e in LedgerFile(ledger).read("chat-serving")}
    assert list(entries[drill.run_id].phases) == list(entries[result["run_id"]].phases) == MILESTONES
    assert _task_runs(result["run_id"], expect=len(CALLS)) == {name: "COMPLETED" for name in CALLS}
