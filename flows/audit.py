"""The `audit` flow: a monthly checkpoint integrity audit (see core/audit.py).

A random sample of the certified checkpoints on the secondary (seeded by the flow run, or
by `seed`) is loaded on `<runbook>-audit` with the runbook's compute, runs `steps` steps
from each, and must reproduce the recorded loss curve (`verify.loss_log`). Teardown is
guaranteed; the report is a markdown artifact; a failed audit fails the run.
"""

from __future__ import annotations

import tempfile
from typing import Annotated, Any

from prefect import flow
from pydantic import Field

from lifeboat_dr.kernel.errors import LifeboatError


class AuditFailed(LifeboatError):
    """A sampled checkpoint did not reproduce its loss curve (or the audit could not run)."""


def run_audit(rb, *, sample_size: int, steps: int | None, seed: int | str, compute=None):
    """Plain Python: the composition (stores, compute, recorded curve) and the audit."""
    from lifeboat_dr.core.audit import AuditReport, audit_checkpoints, audit_cluster, choose_option, sample
    from lifeboat_dr.core.certify import certified_checkpoints
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.flows.wiring import job_spec, providers_for, read_text
    from lifeboat_dr.kernel.errors import ConfigError
    from lifeboat_dr.providers.compute.base import plan_options
    from lifeboat_dr.providers.image_registry import FakeRegistry

    if not rb.verify.loss_log:
        raise ConfigError(f"{rb.name}: verify.loss_log is not set: there is no loss curve to audit against")
    p = providers_for(rb, registry=FakeRegistry())  # the audit pulls no images itself
    compute = compute or p.compute
    certified = list(certified_checkpoints(p.secondary, p.primary, layout=rb.checkpoint.layout.value))
    recorded = parse_losses(read_text(rb, rb.verify.loss_log, p.open_store))
    report = AuditReport(rb.name, seed, len(certified), cluster=audit_cluster(rb.name))
    chosen = sample(certified, sample_size, seed)
    before = _listing(p.secondary)
    with tempfile.TemporaryDirectory(prefix=f"lifeboat-audit-{rb.name}-") as local_scratch:
        # where the audited job writes: this machine's temp folder for local compute, the
        # cluster's own /tmp for a remote one
        scratch = local_scratch if rb.secondary.infra == "local" else f"/tmp/lifeboat-audit-{rb.name}"
        report.cases, report.torn_down, report.error = audit_checkpoints(
            compute,
            report.cluster,
            choose_option(compute, plan_options(rb.secondary.candidates)),
            job_spec(rb),
            chosen,
            recorded,
            steps=steps or max(rb.verify.parity_steps, 1),
            tolerance=rb.verify.parity_tolerance,
            timeout_s=rb.verify.first_step_timeout.total_seconds(),
            scratch=scratch,
        )
    if _listing(p.secondary) != before and not report.error:
        report.error = f"the audited job wrote into {p.secondary.uri}: it must honour LIFEBOAT_AUDIT_DIR"
    return report


def _listing(store) -> list[tuple[str, int, str]]:
    return [(o.key, o.size, o.version) for o in store.list() if not o.key.startswith("_lifeboat/")]


@flow(name="audit", log_prints=True)
def audit(
    runbook: str,
    sample_size: Annotated[int, Field(ge=1)] = 3,
    steps: Annotated[int | None, Field(ge=1)] = None,
    seed: str | None = None,
) -> dict[str, Any]:
    """Load a random sample of certified checkpoints, run a few steps, compare the loss curve.

    Args:
        runbook: Path of the runbook YAML on the worker.
        sample_size: How many certified checkpoints to load.
        steps: Steps to run from each (default: verify.parity_steps).
        seed: Sampling seed; default: this flow run's id (repeatable from it).
    """
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    report = run_audit(rb, sample_size=sample_size, steps=steps, seed=seed or str(flow_run.id))
    print("\n".join(report.lines()))
    try:
        create_markdown_artifact(report.markdown(), key=f"audit-{rb.name}", description="Checkpoint audit")
    except Exception as e:  # the record must not hide the verdict
        print(f"could not record the audit artifact: {e}")
    if not report.passed:
        raise AuditFailed("\n".join(report.lines()))
    return {
        "passed": report.passed,
        "seed": report.seed,
        "checkpoints": [c.step for c in report.cases],
        "cluster": report.cluster,
    }
