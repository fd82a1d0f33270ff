"""The `audit` flow: a monthly checkpoint integrity audit (see core/audit.py).

A random sample of the certified checkpoints on the secondary (seeded by the flow run, or
by `seed`) is loaded on `<runbook>-audit` with the runbook's compute, runs `steps` steps
from each, and must reproduce the loss curve of the lineage that wrote it (`lineage_curves`:
the primary's jobs log to `verify.loss_log`, the secondary's to its counterpart at the
secondary, and the job running now also to its cluster's log). Teardown is guaranteed; the
report is a markdown artifact; a failed audit fails the run, in one line (no traceback).
"""

from __future__ import annotations

import tempfile
from typing import Annotated, Any

from prefect import flow
from prefect.states import Failed
from pydantic import Field

from lifeboat_dr.kernel.errors import LifeboatError


class AuditFailed(LifeboatError):
    """A sampled checkpoint did not reproduce its loss curve (or the audit could not run)."""


def run_audit(rb, *, sample_size: int, steps: int | None, seed: int | str, compute=None):
    """Plain Python: the composition (stores, compute, each lineage's curve) and the audit."""
    from lifeboat_dr.core.audit import (
        AuditReport,
        audit_checkpoints,
        audit_cluster,
        auditable,
        checkpoint_lineage,
        choose_option,
        sample,
    )
    from lifeboat_dr.core.certify import certified_checkpoints
    from lifeboat_dr.flows.wiring import job_spec, providers_for
    from lifeboat_dr.kernel.errors import ConfigError
    from lifeboat_dr.providers.compute.base import plan_options
    from lifeboat_dr.providers.image_registry import FakeRegistry

    if not rb.verify.loss_log:
        raise ConfigError(f"{rb.name}: verify.loss_log is not set: there is no loss curve to audit against")
    p = providers_for(rb, registry=FakeRegistry())  # the audit pulls no images itself
    compute = compute or p.compute
    certified = list(certified_checkpoints(p.secondary, p.primary, layout=rb.checkpoint.layout.value))
    lineages = {c.uri: checkpoint_lineage(p.secondary, c.uri) for c in certified}
    curves = lineage_curves(rb, p, compute, set(lineages.values()))
    ready = [c for c in certified if auditable(c.step, curves.get(lineages[c.uri]))]
    report = AuditReport(rb.name, seed, len(certified), cluster=audit_cluster(rb.name))
    report.not_yet = sorted({c.step for c in certified} - {c.step for c in ready})
    chosen = sample(ready, sample_size, seed)
    before = _listing(p.secondary, certified)
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
            curves,
            lineages,
            steps=steps or max(rb.verify.parity_steps, 1),
            tolerance=rb.verify.parity_tolerance,
            timeout_s=rb.verify.first_step_timeout.total_seconds(),
            scratch=scratch,
        )
    if _listing(p.secondary, certified) != before and not report.error:
        report.error = f"the audited job wrote into {p.secondary.uri}: it must honour LIFEBOAT_AUDIT_DIR"
    return report


def standby_loss_log(rb) -> str | None:
    """Where the secondary's job logs its losses: `verify.loss_log` with the primary's store
    swapped for the secondary's — the same key of the secondary store for a log kept in the
    primary store, the same place beside (or inside) a `file://` folder for a path there
    (the demo trainer's `<store>-loss.jsonl`). None when the log is not named after the
    primary's store."""
    from lifeboat_dr.flows.wiring import loss_log_key

    where = rb.verify.loss_log
    if "://" in where:
        key = loss_log_key(rb)
        return None if key is None else rb.store_uri(rb.secondary.store).rstrip("/") + "/" + key
    primary, secondary = rb.store_uri(rb.primary.store), rb.store_uri(rb.secondary.store)
    if not (primary.startswith("file://") and secondary.startswith("file://")):
        return None
    path, root = str(rb.resolve(where)), primary.removeprefix("file://").rstrip("/")
    if not path.startswith(root):
        return None
    return secondary.removeprefix("file://").rstrip("/") + path[len(root) :]


def lineage_curves(rb, p, compute, lineages: set[str]) -> dict:
    """Each lineage's loss curve: the log of its site's jobs (the primary's at
    `verify.loss_log`, the secondary's at `standby_loss_log`), and for the lineage active now
    its running job's own log too (its cluster: `<name>-dr` on the secondary, the failback's
    on the primary), which is what the failover's parity gate read."""
    from lifeboat_dr.core.audit import Curve, lineage_site
    from lifeboat_dr.core.resume import parse_losses
    from lifeboat_dr.core.sitestate import read_site_state, site_stores
    from lifeboat_dr.flows.wiring import cluster_name, failback_cluster, read_text

    logs = {"primary": rb.verify.loss_log, "secondary": standby_loss_log(rb)}
    active = read_site_state(site_stores(p.primary, p.secondary, p.witness)).lease
    running = {"primary": failback_cluster(rb), "secondary": cluster_name(rb)}
    curves = {}
    for lineage in sorted(lineages):
        site = lineage_site(lineage)
        where = logs.get(site)
        texts, sources = [], []
        if where:
            texts.append(read_text(rb, where, p.open_store))
            sources.append(where)
        cluster = running.get(site)
        if active is not None and lineage == active.lineage and cluster in compute.clusters():
            texts.append(compute.logs(cluster))
            sources.append(f"the job log of {cluster}")
        losses = parse_losses("\n".join(texts))
        source = " + ".join(sources) or f"no loss log is known for the {site}'s job"
        curves[lineage] = Curve(losses, f"the loss log of {lineage} ({source})")
    return curves


def _listing(store, certified) -> list[tuple[str, int, str]]:
    """The objects of the certified checkpoints (the job active there may add new ones)."""
    root = store.uri.rstrip("/") + "/"
    prefixes = tuple(c.uri[len(root) :].rstrip("/") + "/" for c in certified if c.uri.startswith(root))
    return [(o.key, o.size, o.version) for o in store.list() if o.key.startswith(prefixes)]


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

    from lifeboat_dr.core.audit import AuditReport, audit_cluster
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    seed = seed or str(flow_run.id)
    try:
        report = run_audit(rb, sample_size=sample_size, steps=steps, seed=seed)
    except LifeboatError as e:  # nothing launched: the audit could not start (a store, the runbook)
        report = AuditReport(rb.name, seed, 0, cluster=audit_cluster(rb.name), torn_down=True, error=str(e))
    print("\n".join(report.lines()))
    try:
        create_markdown_artifact(report.markdown(), key=f"audit-{rb.name}", description="Checkpoint audit")
    except Exception as e:  # the record must not hide the verdict
        print(f"could not record the audit artifact: {e}")
    if not report.passed:  # a failed run that says why in one line; raising would log a traceback
        return Failed(message=report.why_failed(), data=AuditFailed(report.why_failed()))
    return {
        "passed": report.passed,
        "seed": report.seed,
        "checkpoints": [c.step for c in report.cases],
        "cluster": report.cluster,
    }
