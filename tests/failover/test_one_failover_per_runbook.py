"""Exactly one failover per runbook at a time, on a real Prefect server.

Three failover runs of one runbook start at once, each in its own process (as three workers
picking up a duplicate alert, a re-fire and a retry would): one holds the runbook's lock and
resumes the job; the others stand down with the reason in the ledger, fencing nothing.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.fencing import read_lease
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.runbooks.loader import load_runbook
from tests.flow_run_processes import printed_result

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from lifeboat_dr.flows.failover import failover, outcome_of
state = failover(runbook=sys.argv[1], force=True, evidence=["test: duplicate alert"], approval="approve", return_state=True)
out = outcome_of(state)
print("RESULT " + json.dumps(out))
"""


def test_concurrent_failovers_of_one_runbook_resume_it_exactly_once(prefect_server, tmp_path):
    from prefect.settings import PREFECT_API_URL

    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "one-at-a-time", root=tmp_path)
    path = tmp_path / "one-at-a-time.yaml"
    doc = rb.model_dump(mode="json", exclude_none=True)
    path.write_text(yaml.safe_dump(doc))
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "PYTHONPATH": str(ROOT),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN, str(path)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=200)
        result = printed_result(out)
        assert result, f"exit {p.returncode}: {err[-2000:]}"
        outcomes.append(result["outcome"])
    assert sorted(outcomes) == ["completed", "stood-down", "stood-down"]

    entries = LedgerFile(tmp_path / "ledger.jsonl").read(rb.name)
    stood = [e for e in entries if e.outcome == "stood-down"]
    assert len(stood) == 2 and all("stood down" in e.notes for e in stood)
    assert all("fenced" not in e.phases and "first_step" not in e.phases for e in stood)
    lease, _ = read_lease(LocalStore(rb.store_uri(rb.secondary.store).removeprefix("file://")))
    winner = next(e for e in entries if e.outcome == "completed")
    assert (lease.epoch, lease.run_id) == (1, winner.run_id), "fenced once, by the run that resumed"
