"""The monthly checkpoint audit: sampled certified checkpoints reproduce the recorded loss
curve on `<runbook>-audit`, which is always torn down; a tampered curve fails it."""

import json

import pytest
import yaml

from lifeboat_dr.flows.audit import run_audit
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.runbooks.loader import load_runbook
from tests.drills.conftest import DEMO


def _sandboxed_runbook(workdir):
    rb = sandboxed(load_runbook(str(DEMO)), "audit")
    path = rb.path
    path.write_text(yaml.safe_dump(rb.model_dump(mode="json")))
    return load_runbook(str(path))


def _listing(store_dir):
    return sorted(
        (p.relative_to(store_dir), p.stat().st_mtime_ns) for p in store_dir.rglob("*") if p.is_file()
    )


@pytest.mark.integration
def test_audit_flow_passes_and_leaves_the_checkpoints_and_no_cluster(prefect_server, workdir):
    from lifeboat_dr.flows.audit import audit

    rb = _sandboxed_runbook(workdir)
    secondary = rb.resolve(rb.secondary.store.removeprefix("file://"))
    before = _listing(secondary)

    result = audit(str(rb.path), sample_size=3, seed="42")

    assert result["passed"] and len(result["checkpoints"]) == 3
    assert result["cluster"] == "demo-audit"
    assert _listing(secondary) == before  # the audited job wrote elsewhere
    assert LocalCompute(rb.base_dir / ".lifeboat" / "clusters").clusters() == []


@pytest.mark.processes
def test_the_same_seed_samples_the_same_checkpoints(workdir):
    rb = _sandboxed_runbook(workdir)
    first = run_audit(rb, sample_size=2, steps=2, seed="run-7")
    again = run_audit(rb, sample_size=2, steps=2, seed="run-7")

    assert [c.step for c in first.cases] == [c.step for c in again.cases]


@pytest.mark.processes
def test_audit_fails_when_the_recorded_curve_differs(workdir):
    rb = _sandboxed_runbook(workdir)
    log = rb.resolve(rb.verify.loss_log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for rec in lines:
        rec["loss"] = rec["loss"] * 1.001  # a different run's curve
    log.write_text("".join(json.dumps(rec) + "\n" for rec in lines))

    report = run_audit(rb, sample_size=2, steps=3, seed="1")

    assert not report.passed and report.torn_down
    assert all(not c.passed and "relative > tolerance" in c.parity.detail for c in report.cases)


@pytest.mark.processes
def test_audit_fails_when_the_audited_job_writes_into_the_checkpoint_store(workdir):
    rb = _sandboxed_runbook(workdir)
    secondary = rb.resolve(rb.secondary.store.removeprefix("file://"))
    doc = rb.model_dump(mode="json")
    doc["job"]["command"] = f"echo junk > {secondary}/step-00000005/intruder.bin; {doc['job']['command']}"
    rb.path.write_text(yaml.safe_dump(doc))

    report = run_audit(load_runbook(str(rb.path)), sample_size=1, steps=2, seed="1")

    assert not report.passed and "must honour LIFEBOAT_AUDIT_DIR" in report.error
