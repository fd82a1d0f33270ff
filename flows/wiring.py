"""The composition root: the only place a runbook turns into providers and plain settings.

No behaviour lives here: the steps are `lifeboat_dr.core.failover.steps.ProviderSteps`, the walk
is `lifeboat_dr.core.failover.walk`. This module opens a runbook's stores (one opener, which keeps
each site's S3-compatible `endpoint_url`), builds its compute, registry, probes, ledger and
approval gate, and reads its policy into `FailoverSettings` / `StepSpec` (and replication's
into `ReplicationSettings`) and its other sections into the typed values core and providers
take (`JobSpec`, `PrestagePlan`, `RunbookFigures`): no function there is handed the whole
runbook (tests/test_composition_root.py holds them to it).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lifeboat_dr.kernel.errors import LifeboatError, NotFound
from lifeboat_dr.providers.storage import open_store

if TYPE_CHECKING:  # imported where used: a command that only opens stores (replicate,
    # certify) does not load the failover graph, the ledger or the compute providers
    from lifeboat_dr.core.advise.inputs import RunbookFigures
    from lifeboat_dr.core.failover.contract import FailoverSettings
    from lifeboat_dr.core.failover.steps import Providers, ProviderSteps, StepSpec
    from lifeboat_dr.core.ledger import RtoLedger
    from lifeboat_dr.core.prestage import PrestagePlan
    from lifeboat_dr.core.replication.direction import ReplicationSettings
    from lifeboat_dr.providers.compute.base import Compute, JobSpec
    from lifeboat_dr.providers.compute.skydryrun import DryRun
    from lifeboat_dr.providers.image_registry import OciRegistry, Registry
    from lifeboat_dr.providers.storage.base import Store
    from lifeboat_dr.runbooks.model import Runbook, Site


def cluster_name(rb: Runbook, drill: str | None = None) -> str:
    """The secondary cluster's name: one per runbook, so a re-run finds it (idempotent);
    drills get their own, never the production one."""
    return f"{rb.name}-drill-{drill}" if drill else f"{rb.name}-dr"


# -- stores ---------------------------------------------------------------------------------
def store_opener(rb: Runbook, *, deadline_s: float | None = None) -> Callable[[str], Store]:
    """Any store URI -> its Store. A URI in a site's bucket (the checkpoints, prestaged
    weights, the loss log) gets that site's `endpoint_url` (R2, MinIO); others get none.
    `deadline_s` bounds each call on an unanswering store (default: `LIFEBOAT_STORE_DEADLINE`)."""
    sites = [rb.secondary, rb.primary, *([rb.witness] if rb.witness is not None else [])]

    def bucket(uri: str) -> tuple[str, str]:
        parsed = urlparse(uri)
        return parsed.scheme, parsed.netloc

    def opener(uri: str) -> Store:
        uri = rb.store_uri(uri)
        site = next((s for s in sites if bucket(rb.store_uri(s.store)) == bucket(uri)), None)
        endpoint = site.endpoint_url if site is not None and uri.startswith("s3://") else None
        return open_store(uri, endpoint_url=endpoint, deadline_s=deadline_s)

    return opener


def open_site(rb: Runbook, site: Site) -> Store:
    """The checkpoint store of `rb.primary` or `rb.secondary`."""
    return store_opener(rb)(site.store)


def open_sites(rb: Runbook) -> tuple[Store, Store]:
    """(primary, secondary) checkpoint stores."""
    return open_site(rb, rb.primary), open_site(rb, rb.secondary)


def open_witness(rb: Runbook) -> Store | None:
    """The runbook's witness store (site state only), or None when it names none."""
    return store_opener(rb)(rb.witness.store) if rb.witness is not None else None


def certify_runbook(
    rb: Runbook, *, at: datetime | None = None, deep: bool = False, primary_down: str | None = None
):
    """Certify the runbook's secondary store against its primary. The primary (and the
    witness) are read for the site state within the probe deadline, and the primary is
    asked first within it: one that does not answer costs that much at most, and the
    manifests decide. `primary_down`: why it is known down (the outage is confirmed): then
    it is not asked at all."""
    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.core.sitestate import site_stores

    source, replica = open_sites(rb)
    probe = probe_store_opener(rb)
    primary_probe = probe(rb.primary.store)
    witness = probe(rb.witness.store) if rb.witness is not None else None
    return certify_replica(
        replica,
        source,
        layout=rb.checkpoint.layout,
        at=at,
        deep=deep,
        sites=site_stores(primary_probe, replica, witness),
        source_down=primary_down,
        source_probe=primary_probe,
        replicated_by=rb.replication.value,
    )


def read_text(rb: Runbook, where: str, opener: Callable[[str], Store] | None = None) -> str:
    """A text file given as a path relative to the runbook or as a store URI (the loss log)."""
    if "://" not in where:
        path = rb.resolve(where)
        return path.read_text() if path.exists() else ""
    parent, _, key = rb.store_uri(where).rpartition("/")
    try:
        return b"".join((opener or store_opener(rb))(parent).read(key)).decode()
    except NotFound:  # never replicated: nothing to compare, so parity is not provable
        return ""


# -- replication -------------------------------------------------------------------------------
def replication_settings(rb: Runbook) -> ReplicationSettings:
    """What replication and the standby's retention read of the runbook."""
    from lifeboat_dr.core.replication.direction import ReplicationSettings
    from lifeboat_dr.core.retention import RetentionPolicy

    retention = rb.checkpoint.retention
    return ReplicationSettings(
        runbook=rb.name,
        layout=rb.checkpoint.layout.value,
        rpo_target=rb.rpo_target,
        retention=RetentionPolicy(retention.keep_last, retention.keep_every),
        loss_log_key=loss_log_key(rb),
    )


def loss_log_key(rb: Runbook) -> str | None:
    """The runbook's pre-failure loss log as a key of the primary store, when it lives there:
    replication then copies it beside the checkpoints, and the failover reads that copy."""
    where = rb.verify.loss_log
    if not where or "://" not in where:
        return None
    uri, root = rb.store_uri(where), rb.store_uri(rb.primary.store).rstrip("/") + "/"
    return uri[len(root) :] if uri.startswith(root) and len(uri) > len(root) else None


def loss_log_for_failover(rb: Runbook) -> str | None:
    """Where the failover reads the pre-failure loss log: the secondary's copy of one kept in
    the primary store (the primary is down), else the runbook's own path or URI."""
    key = loss_log_key(rb)
    if key is None:
        return rb.verify.loss_log
    return rb.store_uri(rb.secondary.store).rstrip("/") + "/" + key


# -- providers --------------------------------------------------------------------------------
def providers_for(rb: Runbook, *, registry: Registry | None = None) -> Providers:
    """The runbook's stores, compute and image registry. The primary may be unopenable (the
    outage): then it is None and the secondary must do."""
    from lifeboat_dr.core.failover.steps import Providers

    opener = store_opener(rb)
    try:
        primary, probe = opener(rb.primary.store), probe_store_opener(rb)(rb.primary.store)
    except LifeboatError:
        primary = probe = None
    return Providers(
        primary,
        opener(rb.secondary.store),
        compute_for(rb),
        registry or registry_for(rb),
        opener,
        witness=opener(rb.witness.store) if rb.witness is not None else None,
        primary_probe=probe,
    )


def compute_for(rb: Runbook, *, live: bool | None = None, state_dir=None, **kwargs) -> Compute:
    """The backend a runbook's secondary needs: `local` runs job.command as a process group
    (state under `state_dir`, default `<runbook dir>/.lifeboat/clusters`); anything else is
    SkyPilot with the job's task YAML, priced over the catalog `plan.catalog` chooses
    (`live` overrides it: True live, False the shipped snapshot), as a managed job when
    `job.managed` says so."""
    if rb.secondary.infra == "local":
        from lifeboat_dr.providers.compute.local import LocalCompute

        return LocalCompute(state_dir or rb.base_dir / ".lifeboat" / "clusters")
    from lifeboat_dr.providers.compute.skycatalog import choose_catalog
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute, task_nodes

    setting = rb.plan.catalog if live is None else ("live" if live else "snapshot")
    catalog = choose_catalog(setting)
    task = rb.resolve(rb.job.task)
    kwargs.setdefault("store_uri", rb.store_uri(rb.secondary.store))
    kwargs.setdefault("primary_store_uri", rb.store_uri(rb.primary.store))
    kwargs.setdefault("price_source", catalog.describe())
    if rb.job.managed is not None:
        kwargs.setdefault("managed", True)
        kwargs.setdefault("job_recovery", rb.job.managed.job_recovery())
    return SkyPilotCompute(
        offline=catalog.kind == "snapshot", task_yaml=task, num_nodes=task_nodes(task), **kwargs
    )


def registry_for(rb: Runbook, *, mirror: dict[str, str] | None = None) -> OciRegistry:
    """Where the secondary pulls the runbook's images from: its `prestage.mirrors` (or
    `mirror`), with the credentials for every host involved."""
    from lifeboat_dr.providers.image_registry import OciRegistry

    mirrors = mirror if mirror is not None else rb.prestage.mirrors
    return OciRegistry.for_images([i.image for i in rb.prestage.images], mirrors)


def job_spec(rb: Runbook, checkpoint: str | None = None) -> JobSpec:
    """The runbook's job as the compute backends start it, resuming from `checkpoint`."""
    from lifeboat_dr.providers.compute.base import JobSpec

    job = rb.job
    return JobSpec(
        name=rb.name,
        command=job.command,
        task_yaml=rb.resolve(job.task) if job.task else None,
        workdir=rb.resolve(job.workdir) if job.workdir else rb.base_dir,
        resume_env=job.resume.env,
        resume_arg=job.resume.arg,
        checkpoint=checkpoint,
        store_uri=rb.store_uri(rb.secondary.store),
        primary_store_uri=rb.store_uri(rb.primary.store),
        env=job.guard.env() if job.guard else {},
    )


def runbook_env(rb: Runbook) -> dict[str, str]:
    """What a guarded job's fault event names its runbook by (`core.guard.loop`): its name,
    which the runbook's `recover` automation matches, and its file, for whoever reads the event.
    Only the primary's job carries it (`flows.recovery.primary_job`; the operator's own launch
    sets it): a rehearsal's, an audit's or the secondary's job must start no recovery of it."""
    from lifeboat_dr.core.guard.loop import RUNBOOK_ENV, RUNBOOK_NAME_ENV

    return {RUNBOOK_NAME_ENV: rb.name} | ({RUNBOOK_ENV: str(rb.path)} if rb.path else {})


def blocked_infras(rb: Runbook) -> tuple[str, ...]:
    """Where a failover must not go: the failed primary's infra (`local` names no region,
    so there is nothing to block)."""
    return () if rb.primary.infra == "local" else (rb.primary.infra,)


def sky_dry_run(rb: Runbook, *, checkpoint: str = "<certified checkpoint>") -> DryRun:
    """The runbook's task through SkyPilot's own dry-run launch, on its first feasible
    candidate with the primary blocked, resuming from a placeholder under the secondary store."""
    from lifeboat_dr.providers.compute.base import plan_options
    from lifeboat_dr.providers.compute.skydryrun import dry_run_launch

    secondary = rb.store_uri(rb.secondary.store)
    return dry_run_launch(
        job_spec(rb, f"{secondary.rstrip('/')}/{checkpoint}"),
        plan_options(rb.secondary.candidates),
        blocked=blocked_infras(rb),
        job_recovery=rb.job.managed.job_recovery() if rb.job.managed else None,
    )


def prestage_plan(rb: Runbook) -> PrestagePlan:
    """The runbook's prestage section with its URIs resolved."""
    from lifeboat_dr.core.prestage import PrestagePlan

    p = rb.prestage
    return PrestagePlan(
        images=tuple((i.image, i.digest) for i in p.images),
        weights=tuple(rb.store_uri(w) for w in p.weights),
        secondary_store=rb.store_uri(rb.secondary.store),
        pull=p.pull,
    )


PROBE_ATTEMPTS = 2  # per store call in a probe: the next watch run asks again a minute later


def probe_store_opener(rb: Runbook) -> Callable[[str], Store]:
    """`store_opener` with the probe deadline and fewer attempts per call: a primary that
    hangs must not hold one watch run past its schedule (5 attempts × the 5 s connect timeout per call, three calls
    per probe, made one watch run take 130 s; see docs/deploy.md)."""
    opener = store_opener(rb, deadline_s=probe_deadline())

    def open_for_probe(uri: str) -> Store:
        store = opener(uri)
        if isinstance(getattr(store, "max_attempts", None), int):
            store.max_attempts = min(store.max_attempts, PROBE_ATTEMPTS)
        return store

    return open_for_probe


def build_probes(rb: Runbook, *, xid_wait_ms: int | None = 0, vantage: str | None = None) -> list:
    """One probe per signal the runbook lists (alerts arrive through `lifeboat serve`).
    `vantage` (control-plane, secondary): each probe runs bounded and its readings say from
    where, so the quorum can tell a dead primary from this vantage's own broken link. Each
    probe names its `target` (the store's endpoint; `detection.provider_endpoint` gives the
    provider signal one of its own): a target that does not answer is one vote however many
    probes read it."""
    from urllib.parse import urlparse as _parse

    from lifeboat_dr.core.detection.probes import (
        CheckpointFreshnessProbe,
        GpuHealthReadingProbe,
        TrainingProgressProbe,
        file_heartbeat,
        store_heartbeat,
    )
    from lifeboat_dr.core.detection.provider import ProviderProbe
    from lifeboat_dr.providers.health.control_plane import HttpControlPlane, StoreControlPlane
    from lifeboat_dr.providers.health.nvml import NvmlHealth
    from lifeboat_dr.providers.storage.base import store_target

    signals = {str(getattr(s, "value", s)) for s in rb.detection.signals}
    # a probe must read "failing" in seconds, not wait out the store's default deadline
    opener = probe_store_opener(rb)
    probes: list = []
    wants_store = "checkpoint_freshness" in signals or (
        "provider" in signals and not rb.detection.provider_endpoint
    )
    primary = opener(rb.primary.store) if wants_store else None
    if "gpu_health" in signals:
        probes.append(GpuHealthReadingProbe(NvmlHealth(xid_wait_ms=xid_wait_ms)))
    if "training_progress" in signals and rb.detection.heartbeat:
        where = rb.detection.heartbeat
        if _parse(where).scheme in ("s3", "gs", "file"):
            parent, _, key = rb.store_uri(where).rstrip("/").rpartition("/")
            store = opener(parent)
            reader, target = store_heartbeat(store, key), store_target(store)
        else:
            reader, target = file_heartbeat(rb.resolve(where)), None
        probes.append(
            TrainingProgressProbe(
                reader, rb.detection.stall_after, source=f"heartbeat:{where}", target=target
            )
        )
    if "checkpoint_freshness" in signals:

        def newest():
            return max((o.updated for o in primary.list()), default=None)

        probes.append(
            CheckpointFreshnessProbe(
                newest,
                rb.checkpoint.cadence,
                rb.checkpoint.freshness_factor,
                source=primary.uri,
                target=store_target(primary),
            )
        )
    if "provider" in signals:
        endpoint = rb.detection.provider_endpoint
        plane = (
            HttpControlPlane(endpoint, timeout_s=probe_deadline()) if endpoint else StoreControlPlane(primary)
        )
        probes.append(ProviderProbe(plane))
    if rb.serving is not None:  # serving: the primary's own health endpoint, and the router's check of it
        probes += serving_probes(rb, signals)
    if vantage is None:
        return probes
    from lifeboat_dr.core.detection.vantage import VantageProbe

    bound = 4 * probe_deadline()  # the provider probe's 3 pings, each within the deadline
    return [VantageProbe(p, vantage, bound_s=bound) for p in probes]


def serving_probes(rb: Runbook, signals: set[str]) -> list:
    """`endpoint_health` and `router_health` for a serving runbook that lists them."""
    from lifeboat_dr.core.detection.probes import EndpointHealthProbe, RouterHealthProbe
    from lifeboat_dr.providers.serving.http import HttpEndpoint

    probes: list = []
    if "endpoint_health" in signals:
        endpoint = HttpEndpoint(rb.serving.primary_url)
        probes.append(EndpointHealthProbe(endpoint, rb.serving.health_path, timeout_s=probe_deadline()))
    if "router_health" in signals:
        probes.append(RouterHealthProbe(build_router(rb), "primary", name=rb.serving.traffic.router.value))
    return probes


def probe_deadline() -> float:
    """Seconds one probe call may wait on an unanswering store (`LIFEBOAT_PROBE_DEADLINE`, 2 s):
    the provider probe pings three times, so a dead region reads failing in about 6 s."""
    from lifeboat_dr.providers.storage.base import store_deadline

    return store_deadline(float(os.environ.get("LIFEBOAT_PROBE_DEADLINE", "2")))


# -- the failover ------------------------------------------------------------------------------
def settings_for(rb: Runbook) -> FailoverSettings:
    from lifeboat_dr.core.failover.contract import FailoverSettings

    f, a = rb.failover, rb.approval
    return FailoverSettings(
        runbook=rb.name,
        rto_target=rb.rto_target,
        rpo_target=rb.rpo_target,
        retries=f.retries,
        retry_delay_s=f.retry_delay.total_seconds(),
        step_timeout_s=f.step_timeout.total_seconds(),
        expected_ready=f.expected_ready,
        provision_before_approval=a.provision_before_approval,
        on_parity_failure=rb.verify.on_parity_failure,
        channel=a.channel,
        approvers=tuple(a.approvers),
        logins=tuple(login for person in a.approvers for login in a.logins.get(person, ())),
        on_timeout=str(getattr(a.on_timeout, "value", a.on_timeout)),
        nodes=job_nodes(rb),
    )


def job_nodes(rb: Runbook) -> int | None:
    """Nodes the job's cluster takes: its task's `num_nodes` (1 without one: local compute);
    None when the task cannot be read (the card says nothing rather than guess)."""
    if not rb.job.task:
        return 1
    from lifeboat_dr.providers.compute.skypilot import task_nodes

    try:
        return task_nodes(rb.resolve(rb.job.task))
    except (OSError, ValueError, LifeboatError):
        return None


def spec_for(rb: Runbook, providers: Providers) -> StepSpec:
    from lifeboat_dr.core.detection.quorum import QuorumPolicy
    from lifeboat_dr.core.failover.steps import StepSpec
    from lifeboat_dr.core.prestage import plan_readiness, stage_plan_weights
    from lifeboat_dr.providers.compute.base import plan_options

    plan = prestage_plan(rb)

    def prestage():
        stage_plan_weights(plan, providers.open_store)
        return plan_readiness(plan, providers.registry, providers.open_store)

    v = rb.verify
    loss_log = loss_log_for_failover(rb)  # the secondary's copy when the log lives in the primary store
    return StepSpec(
        layout=rb.checkpoint.layout.value,
        replicated_by=rb.replication.value,
        blocked=blocked_infras(rb),
        candidates=tuple(plan_options(rb.secondary.candidates)),
        provision_budget_s=rb.failover.step_timeout.total_seconds(),
        first_step_timeout_s=v.first_step_timeout.total_seconds(),
        parity_steps=v.parity_steps,
        parity_tolerance=v.parity_tolerance,
        job=lambda uri: job_spec(rb, uri),
        quorum=QuorumPolicy.from_detection(rb.detection),
        probes=lambda: build_probes(rb),
        prestage=prestage,
        loss_log=(lambda: read_text(rb, loss_log, providers.open_store)) if loss_log else None,
        primary_cluster=rb.primary.cluster,
        runbook=rb.name,
        parity_min_coverage=v.parity_min_coverage,
        # a replay beside the job writes here (LIFEBOAT_AUDIT_DIR): on a remote cluster its own
        # /tmp; on local compute a temp folder of this machine
        replay_scratch=None if rb.secondary.infra == "local" else f"/tmp/lifeboat-proof-{rb.name}",
    )


def build_steps(
    rb: Runbook,
    *,
    run_id: str,
    drill: str | None = None,
    outage_started_at: datetime | None = None,
    detected_at: datetime | None = None,
    evidence: Sequence[str] | None = None,
    force: bool = False,
    providers: Providers | None = None,
) -> ProviderSteps:
    from lifeboat_dr.core.failover.steps import ProviderSteps

    providers = providers or providers_for(rb)
    return ProviderSteps(
        spec_for(rb, providers),
        providers,
        run_id=run_id,
        cluster=cluster_name(rb, drill),
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=force,
    )


def build_ledger(
    rb: Runbook,
    *,
    run_id: str,
    drill: str | None = None,
    path: str | Path | None = None,
    kind: str | None = None,
    reopen: bool = False,
) -> RtoLedger:
    """The run's ledger, kept as JSON lines (`LedgerFile`'s default file unless `path`) and,
    with LIFEBOAT_LEDGER_CHAIN set, as a hash chain in stores (`chained_ledger`).
    `reopen` (failover, failback): go on in the entry an earlier attempt of this run id left,
    when the sink holds one (a re-run after a lost worker; `lifeboat_dr.core.failover.rerun`)."""
    sink = ledger_sink(rb, path)
    table = "serving" if rb.serving is not None else "training"
    prior = sink.entry(rb.name, run_id) if reopen else None
    return new_ledger(rb, run_id, drill=bool(drill), kind=kind, table=table, sink=sink, prior=prior)


def ledger_sink(rb: Runbook, path: str | Path | None = None):
    """Where the runbook's ledger entries are kept: `LedgerFile(path)`, teed into the ledger
    chain when LIFEBOAT_LEDGER_CHAIN names one (`chained_ledger`)."""
    from lifeboat_dr.core.ledger import LedgerFile

    sink = LedgerFile(path)
    chain = chained_ledger(rb)
    if chain is not None:
        from lifeboat_dr.core.ledger_chain import TeedLedger

        sink = TeedLedger(sink, chain)
    return sink


def new_ledger(rb: Runbook, run_id: str, **kw) -> RtoLedger:
    """An `RtoLedger` for one run of the runbook (its name and targets), `kw` as `RtoLedger`
    takes them; without a `sink` it is kept nowhere. `build_ledger` gives the flows theirs."""
    from lifeboat_dr.core.ledger import RtoLedger

    return RtoLedger(rb.name, run_id, rto_target=rb.rto_target, rpo_target=rb.rpo_target, **kw)


def chained_ledger(rb: Runbook, where: str | None = None):
    """The ledger chain `where` (default LIFEBOAT_LEDGER_CHAIN) says:
    `sites` for both sites' checkpoint stores (the secondary first: it outlives a primary
    outage), or comma-separated store URIs. None when neither is given."""
    where = where if where is not None else os.environ.get("LIFEBOAT_LEDGER_CHAIN", "")
    if not where.strip():
        return None
    from lifeboat_dr.core.ledger_chain import LedgerChain

    if where.strip() == "sites":
        primary, secondary = open_sites(rb)
        return LedgerChain([secondary, primary])
    opener = store_opener(rb)
    return LedgerChain([opener(u.strip()) for u in where.split(",") if u.strip()])


# -- failback ----------------------------------------------------------------------------------
def one_bucket(rb: Runbook) -> str:
    """Why a `replication: gcs-dual-region` runbook's replicate pass does nothing."""
    return (
        f"{rb.primary.store}: one dual-region bucket is both sites' store (replication: gcs-dual-region): "
        "the bucket replicates, nothing is copied, and retention there is the job's own"
    )


def swapped(rb: Runbook) -> Runbook:
    """The runbook with its sites' roles swapped, for a failback: the recovered primary is
    where the job goes (its infra the only candidate), the failover's cluster on the
    secondary is the one to stop. The walker and `ProviderSteps` then run unchanged."""
    from lifeboat_dr.runbooks.model import Runbook

    doc = rb.model_dump(mode="json")
    home, away = dict(doc["primary"]), dict(doc["secondary"])
    away.pop("candidates", None)
    away["cluster"] = cluster_name(rb)
    home["candidates"] = [{"infra": rb.primary.infra}]
    doc["primary"], doc["secondary"] = away, home
    if doc["replication"] == "s3-crr":  # a bucket rule replicates primary -> secondary only: back is ours
        doc["replication"] = "lifeboat"  # (one dual-region bucket replicates both ways: kept)
    # (the failback's parity compares with the DR job's own log: FailbackSteps replaces the loss log)
    view = Runbook.model_validate(doc)
    view._path = rb._path
    return view


def failback_cluster(rb: Runbook) -> str:
    """The primary's cluster for a failback: the runbook's, else `<name>-home`."""
    return rb.primary.cluster or f"{rb.name}-home"


def build_failback_steps(
    rb: Runbook, *, run_id: str, providers: Providers | None = None, drill: str | None = None
):
    """`FailbackSteps` over the swapped view: reverse replication, then the failover's steps.
    A drill's clusters are its own (`cluster_name(rb, drill)`, `<primary cluster>-drill-<id>`)."""
    from lifeboat_dr.core.failover.failback import FailbackSteps
    from lifeboat_dr.core.replication.direction import hand_back, replicate_by_site_state

    settings = replication_settings(rb)  # the runbook's, not the view's: replication knows the real roles
    view = swapped(rb)
    providers = providers or providers_for(view)
    spec = dataclasses.replace(spec_for(view, providers), primary_cluster=None, activates="primary")

    def catch_up():  # real roles: the view's secondary is the runbook's primary
        return replicate_by_site_state(
            settings, providers.secondary, providers.primary, witness=providers.witness
        )

    return FailbackSteps(
        spec,
        providers,
        run_id=run_id,
        cluster=failback_cluster(rb) + (f"-drill-{drill}" if drill else ""),
        standby_cluster=cluster_name(rb, drill),
        catch_up=catch_up,
        hand_back=lambda: hand_back(
            settings, providers.secondary, providers.primary, witness=providers.witness
        ),
        stop_timeout_s=max(2 * rb.checkpoint.cadence.total_seconds(), 10.0),
    )


def build_gate(rb: Runbook, *, console: str = "wait", drill: bool = False):
    """Slack when the runbook names a channel and a bot token is configured
    (`SLACK_BOT_TOKEN`, as for `lifeboat serve`, or the Prefect Secret block `lifeboat-slack-bot-token`);
    otherwise the console, which waits for the UI or `lifeboat approve` (`wait`), or decides
    at once (`approve` / `reject`, for demos and drills). A `drill` gate says DRILL in what it posts."""
    from lifeboat_dr.flows.approval import ChatGate
    from lifeboat_dr.providers.chat.console import ConsoleChat

    token = _slack_token() if rb.approval.channel and console == "wait" else None
    if token is not None:
        from lifeboat_dr.providers.chat.slack import SlackChat

        return ChatGate(rb, SlackChat(token), drill=drill)
    return ChatGate(rb, ConsoleChat(console), drill=drill)


def _slack_token():
    from pydantic import SecretStr

    from lifeboat_dr.providers.orchestrator.prefect_api import secret

    if value := os.environ.get("SLACK_BOT_TOKEN"):
        return SecretStr(value)
    try:
        return SecretStr(secret("lifeboat-slack-bot-token"))
    except LifeboatError:  # no block, no server: no Slack
        return None


# -- realtime serving ----------------------------------------------------------------------------
def build_router(rb: Runbook):
    """The runbook's traffic router (HAProxy runtime API or Route 53 weighted records)."""
    from lifeboat_dr.kernel.errors import ConfigError

    if rb.serving is None:
        raise ConfigError(f"{rb.name}: no serving section: only realtime-inference runbooks move traffic")
    t = rb.serving.traffic
    sites = {"primary": t.primary, "secondary": t.secondary}
    if t.router.value == "haproxy":
        from lifeboat_dr.providers.traffic.haproxy import HaproxyTraffic

        return HaproxyTraffic(t.socket, t.backend, sites)
    from lifeboat_dr.providers.traffic.route53 import Route53Traffic

    return Route53Traffic(t.zone_id, t.record, sites, record_type=t.record_type, endpoint_url=t.endpoint_url)


def serving_settings(rb: Runbook):
    """The runbook's serving policy (and its failover retries and step timeout) as the core reads it."""
    from lifeboat_dr.core.serving.failover import ServingSettings
    from lifeboat_dr.core.serving.watch import Thresholds

    s = rb.serving
    return ServingSettings(
        standby_site="secondary",
        budget_s=s.canary.latency_budget.total_seconds(),
        health_path=s.health_path,
        model_path=s.model_path,
        canary_path=s.canary.path,
        canary_body=s.canary.body,
        steps=tuple(s.switch.steps),
        hold_s=s.switch.hold.total_seconds(),
        watch_s=s.watch.duration.total_seconds(),
        interval_s=s.watch.interval.total_seconds(),
        thresholds=Thresholds(
            window=s.watch.window,
            max_error_rate=s.watch.max_error_rate,
            max_p99_s=s.watch.max_p99.total_seconds(),
        ),
        retries=rb.failover.retries,
        retry_delay_s=rb.failover.retry_delay.total_seconds(),
        step_timeout_s=rb.failover.step_timeout.total_seconds(),
    )


def certified_weights_digest(rb: Runbook) -> Callable[[], str]:
    """The digest the standby must serve: of `serving.weights` if given, else of the newest
    certified checkpoint of the secondary store (certified against the primary's)."""
    from lifeboat_dr.core.serving.digest import store_weights_digest
    from lifeboat_dr.kernel.errors import StopFailover

    def digest() -> str:
        if rb.serving.weights:
            parent, _, name = rb.store_uri(rb.serving.weights).rstrip("/").rpartition("/")
            return store_weights_digest(store_opener(rb)(parent), name)
        report = certify_runbook(rb)
        if report.certified is None:
            reasons = "; ".join(f"{r.uri}: {r.reason}" for r in report.rejected) or "no checkpoint"
            raise StopFailover(f"no certified weights on {rb.secondary.store}: {reasons}")
        replica = open_site(rb, rb.secondary)
        return store_weights_digest(replica, report.certified.uri.rstrip("/").rsplit("/", 1)[-1])

    return digest


# -- advice ------------------------------------------------------------------------------------
def advice_figures(rb: Runbook) -> RunbookFigures:
    """What `lifeboat advise` and the rendered runbook's advice section read of the runbook."""
    from lifeboat_dr.core.advise.inputs import RunbookFigures

    return RunbookFigures(
        name=rb.name,
        rpo_target=rb.rpo_target,
        rto_target=rb.rto_target,
        interval=rb.checkpoint.cadence,
        keep_last=rb.checkpoint.retention.keep_last,
        cluster=rb.cluster,
    )
