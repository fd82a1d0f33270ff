"""A silently corrupted checkpoint passes certification but fails loss parity: the flow rolls
back to the previous certified checkpoint, or pages, as the runbook says. Real trainer, real
local compute, real stores (a sandbox), on the shared Prefect server."""

import contextlib
import shutil
from pathlib import Path

import numpy as np
from prefect import flow

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, write_manifest
from lifeboat_dr.flows.failover import execute
from lifeboat_dr.flows.sandbox import sandbox_of, sandboxed
from lifeboat_dr.flows.wiring import build_steps, new_ledger, providers_for, settings_for
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.loader import load_runbook
from tests.failover.conftest import Gate

ROOT = Path(__file__).resolve().parents[2]


def corrupt_silently(checkpoint: Path) -> None:
    """Wrong weights under a valid manifest: what a bad GPU writes, and replication copies."""
    np.save(checkpoint / "model.npy", np.load(checkpoint / "model.npy") + 0.5)
    (checkpoint / MANIFEST_NAME).unlink()
    write_manifest(checkpoint, int(checkpoint.name.split("-")[1]))


def failover_with_newest_corrupted(tmp_path, on_parity_failure: str):
    rb = load_runbook(ROOT / "runbooks" / "demo.yaml")
    rb = rb.model_copy(
        update={"verify": rb.verify.model_copy(update={"on_parity_failure": on_parity_failure})}
    )
    rb = sandboxed(rb, "rollback", root=tmp_path)
    box = sandbox_of("rollback", tmp_path)
    corrupt_silently(box.primary / "step-00000040")  # written wrong, then replicated faithfully
    shutil.rmtree(box.secondary / "step-00000040")
    shutil.copytree(box.primary / "step-00000040", box.secondary / "step-00000040")
    providers = providers_for(rb, registry=FakeRegistry())
    steps = build_steps(rb, run_id="run-1", providers=providers, evidence=["test: outage"])
    ledger, gate = new_ledger(rb, "run-1"), Gate()

    @flow
    def harness():
        return execute(settings_for(rb), steps, ledger, gate, run_id="run-1")

    with contextlib.suppress(StopFailover):  # the page test's failover stops; the ledger says why
        harness()
    return ledger.entry, gate, providers


def test_parity_failure_rolls_back_to_the_previous_certified_checkpoint(prefect_server, tmp_path):
    entry, _, providers = failover_with_newest_corrupted(tmp_path, "rollback")
    assert entry.outcome == "completed"
    assert entry.checkpoint.endswith("step-00000035")
    assert entry.notes["rollback"].startswith("parity failed from step 40 (step 41: loss ")
    assert entry.notes["rollback"].endswith("rolled back to step 35")
    assert (
        entry.notes["parity"] == "passed (5 of 5 compared): 5 step(s) in 36..40 within 0 (worst 0 at step 36)"
    )
    for name in providers.compute.clusters():
        providers.compute.teardown(name)


def test_a_runbook_that_says_page_stops_and_pages_at_the_first_failed_gate(prefect_server, tmp_path):
    entry, gate, providers = failover_with_newest_corrupted(tmp_path, "page")
    assert entry.outcome == "failed" and entry.failures[0].phase == "parity_passed"
    assert "loss parity failed" in gate.notes[-1] and "step-00000040" in gate.notes[-1]
    assert providers.compute.clusters() == [], "a failed failover tore its cluster down"
