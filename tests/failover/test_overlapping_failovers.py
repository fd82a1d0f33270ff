"""Two overlapping failovers of one runbook (issue #34), each its own process on a real
Prefect server: the one that holds the lock resumes from the newest certified checkpoint,
which the pre-failure log cannot prove (the primary died at it), and proves it by a replay
beside the job; nothing rolls back, so the secondary's job logs each step once, from 41."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.resume import parse_losses
from tests.failover.test_resume_from_newest import died_at_its_checkpoint
from tests.flow_run_processes import printed_result

pytestmark = [pytest.mark.integration, pytest.mark.processes, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from lifeboat_dr.flows.failover import failover, outcome_of
state = failover(runbook=sys.argv[1], force=True, evidence=["test: overlapping alert"], approval="approve", return_state=True)
print("RESULT " + json.dumps(outcome_of(state)))
"""


def test_overlapping_failovers_resume_once_from_the_newest_checkpoint(prefect_server, tmp_path):
    from prefect.settings import PREFECT_API_URL

    rb, box = died_at_its_checkpoint(tmp_path, "overlap")
    path = tmp_path / "overlap.yaml"
    path.write_text(yaml.safe_dump(rb.model_dump(mode="json", exclude_none=True)))
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "PYTHONPATH": str(ROOT),
    }
    procs = [
        subprocess.Popen([sys.executable, "-c", RUN, str(path)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        result = printed_result(out)
        assert result, f"exit {p.returncode}: {err[-2000:]}"
        outcomes.append(result)
    assert sorted(o["outcome"] for o in outcomes) == ["completed", "stood-down"]
    (winner,) = [e for e in LedgerFile(tmp_path / "ledger.jsonl").read(rb.name) if e.outcome == "completed"]
    assert winner.checkpoint_step == 40 and "rollback" not in winner.notes, winner.notes
    assert winner.parity.outcome == "passed" and winner.parity.replayed_from == 35
    log = (box.root / "secondary-loss.jsonl").read_text()
    steps = [next(iter(parse_losses(ln))) for ln in log.splitlines() if parse_losses(ln)]
    assert steps[0] == 41 and len(steps) == len(set(steps)), steps[:12]
