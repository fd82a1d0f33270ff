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


def _another_runs_curve(log):
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for rec in lines:
        rec["loss"] = rec["loss"] * 1.001
    log.write_text("".join(json.dumps(rec) + "\n" for rec in lines))


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
    _another_runs_curve(rb.resolve(rb.verify.loss_log))

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


# -- after a failover and a failback: each checkpoint against its own lineage's curve ----------

STEP_SECONDS = 0.3  # slow enough that the audit's sample is a handful, fast enough to commit


def _training_on(workdir, name):
    """The demo runbook in a sandbox (primary died at step 23, checkpoints 5..20 replicated),
    its job training on for as long as the test lets it."""
    rb = sandboxed(load_runbook(str(DEMO)), name, steps=20)
    doc = rb.model_dump(mode="json")
    doc["job"]["command"] = doc["job"]["command"].replace(
        "--steps 30", f"--steps 1000 --step-seconds {STEP_SECONDS}"
    )
    rb.path.write_text(yaml.safe_dump(doc))
    return load_runbook(str(rb.path))


def _lineages(store, layout):
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.core.sitestate import read_marker

    out = {}
    for c in committed_checkpoints(store, layout):
        marker = read_marker(store, c.prefix.strip("/"))
        out[c.step] = json.loads(marker)["lineage"] if marker else "primary@0"
    return out


def _await_commits(store, layout, lineage, count, timeout_s=60):
    import time

    deadline = time.monotonic() + timeout_s
    while sum(1 for v in _lineages(store, layout).values() if v == lineage) < count:
        assert time.monotonic() < deadline, f"{lineage} committed fewer than {count} checkpoints"
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.processes
def test_after_a_failover_and_a_failback_each_checkpoint_is_judged_by_its_own_lineage(
    prefect_server, workdir
):
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.failback import failback
    from lifeboat_dr.flows.failover import failover
    from lifeboat_dr.flows.wiring import cluster_name, failback_cluster, open_sites

    rb = _training_on(workdir, "audit-lineage")
    primary, secondary = open_sites(rb)
    layout = rb.checkpoint.layout.value
    compute = LocalCompute(rb.base_dir / ".lifeboat" / "clusters")
    try:
        failover(str(rb.path), force=True, approval="approve", evidence=["test: the primary is gone"])
        _await_commits(secondary, layout, "secondary@1", 2)  # the job trains on at the secondary

        after_failover = run_audit(rb, sample_size=100, steps=2, seed="1")  # while it still trains

        assert after_failover.passed, "\n".join(after_failover.lines())
        assert {c.lineage for c in after_failover.cases} == {"primary@0", "secondary@1"}

        failback(str(rb.path), approval="approve")
        _await_commits(primary, layout, "primary@2", 2)
        replicate_checkpoints(
            primary, secondary, committed_checkpoints(primary, layout), rpo_target=rb.rpo_target
        )

        after_failback = run_audit(rb, sample_size=100, steps=2, seed="1")

        assert after_failback.passed, "\n".join(after_failback.lines())
        assert {c.lineage for c in after_failback.cases} == {"primary@0", "secondary@1", "primary@2"}
    finally:
        for cluster in (cluster_name(rb), failback_cluster(rb)):
            compute.teardown(cluster)


@pytest.mark.integration
@pytest.mark.processes
def test_a_failed_audit_is_one_line_and_exit_1_never_a_traceback(prefect_server, workdir):
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    rb = _sandboxed_runbook(workdir)
    _another_runs_curve(rb.resolve(rb.verify.loss_log))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lifeboat_dr.shell.cli",
            "audit",
            str(rb.path),
            "--sample",
            "1",
            "--seed",
            "3",
        ],
        env={**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()},
        capture_output=True,
        text=True,
        timeout=300,
    )

    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said and "AuditFailed" not in said, said
    (verdict,) = [line for line in done.stderr.splitlines() if line.startswith("lifeboat audit:")]
    assert "FAILED" in verdict and "1 of 1 sampled checkpoint(s) did not reproduce" in verdict, verdict
