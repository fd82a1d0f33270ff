"""Loss parity never costs RPO (issue #34): a failover resumes from the newest certified
checkpoint whatever its proof finds, and the three outcomes stay apart.

Real trainer, real local compute, real `file://` stores (a sandbox of the demo runbook),
the walker on threads. The primary dies *at* its newest checkpoint (40): the pre-failure log
holds no step after it, so the job's own first steps prove nothing; the proof is a replay of
step 35 beside it (`<cluster>-proof`), whose steps 36..40 the log holds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, write_manifest
from lifeboat_dr.core.failover.walk import execute
from lifeboat_dr.core.resume import parse_losses
from lifeboat_dr.flows.sandbox import sandbox_images, sandbox_of, sandboxed
from lifeboat_dr.flows.wiring import build_steps, new_ledger, providers_for, settings_for
from lifeboat_dr.providers.image_registry import FakeRegistry
from lifeboat_dr.runbooks.loader import load_runbook
from tests.failover.conftest import Gate

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]


def died_at_its_checkpoint(tmp_path, name: str, **verify):
    """The sandboxed demo whose primary died right after committing step 40: the log ends at 40."""
    rb = load_runbook(ROOT / "runbooks" / "demo.yaml")
    rb = rb.model_copy(update={"verify": rb.verify.model_copy(update=verify)})
    rb = sandboxed(rb, name, root=tmp_path)
    box = sandbox_of(name, tmp_path)
    kept = [
        line
        for line in box.pre_failure_log.read_text().splitlines()
        if _step(line) is None or _step(line) <= 40
    ]
    box.pre_failure_log.write_text("\n".join(kept) + "\n")
    return rb, box


def _step(line: str) -> int | None:
    losses = parse_losses(line)
    return next(iter(losses), None)


def fail_over(rb, run_id="run-1"):
    providers = providers_for(rb, registry=FakeRegistry(sandbox_images(rb)))
    steps = build_steps(rb, run_id=run_id, providers=providers, evidence=["test: outage"])
    ledger, gate = new_ledger(rb, run_id), Gate()
    try:
        entry = execute(settings_for(rb), steps, ledger, gate, run_id=run_id, drill=True)
    finally:
        for cluster in providers.compute.clusters():
            providers.compute.teardown(cluster)
    return entry, gate


def test_a_newest_checkpoint_the_log_cannot_prove_is_kept_and_proved_by_a_replay_beside_it(tmp_path):
    rb, _ = died_at_its_checkpoint(tmp_path, "newest")
    entry, gate = fail_over(rb)

    assert entry.outcome == "completed" and "rollback" not in entry.notes, entry.notes
    assert entry.checkpoint_step == 40 and entry.checkpoint.endswith("step-00000040")
    assert entry.parity.outcome == "passed" and entry.parity.replayed_from == 35
    assert (entry.parity.compared, entry.parity.asked) == (5, 5) and "parity_passed" in entry.phases
    assert entry.notes["parity"].startswith("passed by a replay of step 35 (5 of 5 compared)")
    # the card said, before the decision, what it resumes from and how it would prove it
    card = dict(gate.cards[0].facts())
    assert card["Resumes from"] == "step 40, the newest certified checkpoint"
    assert card["Proof"].startswith("a replay of step 35 beside it")
    assert "no rollback" in card["On a parity mismatch"]


def test_the_card_and_the_ledger_name_the_same_checkpoint_and_rpo(tmp_path):
    rb, _ = died_at_its_checkpoint(tmp_path, "card-vs-ledger")
    entry, gate = fail_over(rb)
    card = gate.cards[0]
    assert (
        card.checkpoint.startswith(entry.checkpoint) and f"(step {entry.checkpoint_step}," in card.checkpoint
    )
    assert card.rpo == entry.rpo, (card.rpo, entry.rpo)  # one outage start, one checkpoint


def corrupt_silently(checkpoint: Path) -> None:
    """Wrong weights under a valid manifest: what a bad GPU writes, and replication copies."""
    np.save(checkpoint / "model.npy", np.load(checkpoint / "model.npy") + 0.5)
    (checkpoint / MANIFEST_NAME).unlink()
    write_manifest(checkpoint, int(checkpoint.name.split("-")[1]))


def test_a_mismatch_in_the_replay_pages_and_the_job_keeps_its_progress(tmp_path):
    rb, box = died_at_its_checkpoint(tmp_path, "replay-mismatch")
    corrupt_silently(box.primary / "step-00000035")  # step 35 written wrong, replicated faithfully
    shutil.rmtree(box.secondary / "step-00000035")
    shutil.copytree(box.primary / "step-00000035", box.secondary / "step-00000035")
    entry, gate = fail_over(rb)

    assert entry.outcome == "completed" and entry.checkpoint_step == 40, entry.notes
    assert entry.parity.outcome == "mismatch" and entry.parity.replayed_from == 35
    assert "parity_passed" not in entry.phases
    assert any("MISMATCH in the replay" in n and "trains on from step 40" in n for n in gate.notes), (
        gate.notes
    )


def test_a_mismatch_in_the_replay_stops_the_job_when_the_runbook_says_page(tmp_path):
    rb, box = died_at_its_checkpoint(tmp_path, "replay-page", on_parity_failure="page")
    corrupt_silently(box.primary / "step-00000035")
    shutil.rmtree(box.secondary / "step-00000035")
    shutil.copytree(box.primary / "step-00000035", box.secondary / "step-00000035")
    with pytest.raises(Exception, match="loss parity failed"):
        fail_over(rb)


def test_nothing_to_compare_anywhere_is_not_provable_never_a_rollback(tmp_path):
    rb, box = died_at_its_checkpoint(tmp_path, "unprovable")
    box.pre_failure_log.write_text("")  # the log never reached the secondary
    entry, gate = fail_over(rb)
    assert entry.outcome == "completed" and entry.checkpoint_step == 40 and "rollback" not in entry.notes
    assert entry.parity.outcome == "not provable" and entry.parity.compared == 0
    assert "parity_passed" not in entry.phases
    assert any("NOT PROVABLE" in n for n in gate.notes)
