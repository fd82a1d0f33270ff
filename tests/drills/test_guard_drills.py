"""The training guard's drills on the demo runbook with the torch job: a SIGSTOPped rank
(nccl-hang) and a CUDA error (cuda-error), each recovered by the recovery ladder (restart for
the hang, relaunch-without-node for the CUDA error: it poisons the device), exactly."""

import pytest

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.drill import drill
from lifeboat_dr.standins.trainer.jobs import TRAINERS
from tests.drills.conftest import DEMO

TORCH_MISSING = TRAINERS["torch"].missing()
pytestmark = [
    pytest.mark.integration,  # the shared Prefect server
    pytest.mark.processes,  # torchrun
    pytest.mark.skipif(TORCH_MISSING is not None, reason=TORCH_MISSING or ""),
]


@pytest.mark.parametrize(
    ("kind", "options", "own_check"),
    [
        ("nccl-hang", {"hang_in": "step"}, "the watchdog named the stopped rank within its bound"),
        # rank 1 stopped in a periodic checkpoint save: rank 0 waits in the save's barrier
        ("nccl-hang", {"hang_in": "save"}, "the watchdog named the stopped rank within its bound"),
        ("cuda-error", {}, "an emergency checkpoint of the step before the fault, committed as consistent"),
    ],
)
def test_a_guarded_fault_drill_ends_in_the_guards_stop_and_an_exact_resume(
    prefect_server, workdir, kind, options, own_check
):
    (result,) = drill(str(DEMO), kind=kind, trainer="torch", **options)

    checks = {name: (ok, detail) for name, ok, detail in result["checks"]}
    assert result["passed"], result["checks"]
    assert checks[own_check][0]
    if options.get("hang_in") == "save":
        assert "checkpoint save of step" in checks[own_check][1]
    assert "identical" in checks["resumed losses equal an uninterrupted run's exactly"][1]
    # recovered through the ladder: its entry and the rung's, both drills, the rung's RTO from the fault
    entries = {e.run_id: e for e in LedgerFile(workdir / "ledger.jsonl").read("demo")}
    rung = {"nccl-hang": "restart", "cuda-error": "relaunch-without-node"}[kind]
    ladder, step = (
        entries.pop(f"recovery-{result['run_id']}"),
        entries.pop(f"recovery-{result['run_id']}.{rung}"),
    )
    assert entries == {}  # no failover ran
    assert ladder.drill and ladder.notes["drill"] == kind and ladder.notes["recovered_by"] == rung
    assert step.drill and step.kind == rung and step.outcome == "completed" and step.rto is not None
    assert checks[f"recovered by the ladder's {rung} rung, on the primary's cluster"][0]
    assert list(workdir.glob(".lifeboat/sandbox/*")) == []  # a passed drill leaves no sandbox
