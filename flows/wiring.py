"""The composition root: a runbook's providers, and the failover's steps over them.

`RunbookSteps` implements `lifeboat.failover.FailoverSteps` with real providers: stores from
the runbook's URIs, compute from its secondary (SkyPilot or local), the OCI registry for
images. A dry run builds the very same steps over a sandboxed copy of the runbook
(`flows.sandbox`): local stores in a temporary folder, local compute running the tiny
trainer, a fake registry — so CI rehearses the real code path, not a mock of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lifeboat.errors import LifeboatError, StopFailover
from lifeboat.failover import Certified, Confirmation, Fenced, Parity, Provisioned, Resumed
from lifeboat.ledger import LedgerFile, RtoLedger
from lifeboat.prestage import PrestageReadiness
from providers.compute.base import Compute, JobSpec, PlanOption, candidates_from_runbook
from providers.registry import Registry
from providers.storage import open_site, open_store
from providers.storage.base import Store
from runbooks.model import Runbook


def _now() -> datetime:
    return datetime.now(UTC)


def cluster_name(rb: Runbook, drill: str | None = None) -> str:
    """The secondary cluster's name: one per runbook, so a re-run finds it (idempotent);
    drills get their own, never the production one."""
    return f"{rb.name}-drill-{drill}" if drill else f"{rb.name}-dr"


@dataclass
class Providers:
    """Everything outside Lifeboat that a failover touches."""

    primary: Store | None  # None: not even openable (the outage); the secondary must do
    secondary: Store
    compute: Compute
    registry: Registry
    open_store: Callable[[str], Store]

    @classmethod
    def for_runbook(cls, rb: Runbook, *, registry: Registry | None = None) -> Providers:
        from providers.compute import compute_for_runbook
        from providers.registry import OciRegistry

        def opener(uri: str) -> Store:
            site = rb.secondary if uri.startswith(rb.store_uri(rb.secondary.store)) else rb.primary
            return open_store(uri, endpoint_url=site.endpoint_url if uri.startswith("s3://") else None)

        try:
            primary = open_site(rb, rb.primary)
        except LifeboatError:
            primary = None
        secondary = open_site(rb, rb.secondary)
        return cls(
            primary, secondary, compute_for_runbook(rb), registry or OciRegistry.for_runbook(rb), opener
        )


class RunbookSteps:
    """The failover's steps for one runbook, over its providers. See lifeboat/failover.py."""

    def __init__(
        self,
        rb: Runbook,
        providers: Providers,
        *,
        run_id: str,
        cluster: str,
        outage_started_at: datetime | None = None,
        detected_at: datetime | None = None,
        evidence: Sequence[str] | None = None,
        force: bool = False,
        clock: Callable[[], datetime] = _now,
    ):
        self.rb, self.p = rb, providers
        self.run_id, self.cluster = run_id, cluster
        self.outage_started_at, self.detected_at = outage_started_at, detected_at
        self.evidence, self.force, self.clock = tuple(evidence or ()), force, clock
        self.expected_epoch: int | None = None  # read by confirm()

    def confirm(self) -> Confirmation:
        from lifeboat.fencing import read_lease

        # The epoch seen at confirmation: if another failover fences first, ours stops
        # instead of fencing *it* out.
        current = read_lease(self.p.secondary)
        self.expected_epoch = current[0].epoch if current else 0
        now = self.clock()
        if self.evidence:  # the watch flow's quorum already confirmed it
            return Confirmation(self.outage_started_at or now, self.detected_at or now, self.evidence)
        from flows.watch import build_probes
        from lifeboat.detection.quorum import OutageState, QuorumPolicy, decide

        readings = [probe.check(None) for probe in build_probes(self.rb)]
        now = self.clock()  # after the probes: a reading taken after `now` would not be live
        decision = decide(readings, now, QuorumPolicy.from_detection(self.rb.detection))
        lines = tuple(f"{r.signal}: {r.summary}" for r in readings if r.failing)
        if decision.state is not OutageState.confirmed and not self.force:
            raise StopFailover(f"outage not confirmed: {decision.summary} (start with force to override)")
        if not lines:
            lines = ("started by hand with force: no signal is failing",)
        start = self.outage_started_at or decision.outage_started_at or now
        return Confirmation(start, self.detected_at or now, lines)

    def fence(self) -> Fenced:
        from lifeboat.fencing import fence_job

        lease, on_primary = fence_job(
            self.p.secondary,
            self.p.primary,
            run_id=self.run_id,
            holder=f"lifeboat:{self.cluster}",
            expect_epoch=self.expected_epoch,
        )
        stores = (self.p.secondary.uri,) + ((self.p.primary.uri,) if on_primary else ())
        stopped = False
        if self.rb.primary.cluster:
            try:
                self.p.compute.teardown(self.rb.primary.cluster)
                stopped = True
            except LifeboatError:
                stopped = False  # unreachable: the lease keeps it from committing
        return Fenced(lease.epoch, stores, stopped)

    def certify(self, older_than: int | None = None) -> Certified:
        from lifeboat.certify import certify_replica

        report = certify_replica(
            self.p.secondary,
            self.p.primary,
            layout=self.rb.checkpoint.layout.value,
            at=self.outage_started_at or self.clock(),
            older_than=older_than,
        )
        rejected = tuple(f"step {r.step}: {r.reason} — {r.detail}" for r in report.rejected)
        if report.certified is None:
            older = f" older than step {older_than}" if older_than is not None else ""
            why = f" ({'; '.join(rejected)})" if rejected else ""
            raise StopFailover(f"no certified checkpoint{older} on {self.p.secondary.uri}{why}")
        c = report.certified
        return Certified(self._uri(c.uri), c.step, c.written_at, rejected, report.mode)

    def _uri(self, uri: str) -> str:
        return uri if "://" in uri else f"{self.p.secondary.uri.rstrip('/')}/{uri.strip('/')}"

    def plan(self) -> tuple[PlanOption, ...]:
        # The failed region is blocked; `local` names no region, so there is nothing to block.
        blocked = [] if self.rb.primary.infra == "local" else [self.rb.primary.infra]
        ranked = self.p.compute.plan(candidates_from_runbook(self.rb), blocked=blocked)
        feasible = tuple(o for o in ranked if o.feasible)
        if not feasible:
            why = "; ".join(f"{o.infra}: {o.reason}" for o in ranked)
            raise StopFailover(f"no feasible place to fail over to ({why})")
        return feasible

    def prestage(self) -> PrestageReadiness:
        from lifeboat.prestage import readiness_for, stage_runbook_weights

        stage_runbook_weights(self.rb, self.p.open_store)
        return readiness_for(self.rb, self.p.registry, self.p.open_store)

    def provision(self, options: Sequence[PlanOption]) -> Provisioned:
        from providers.compute.fallback import launch_with_fallback

        result = launch_with_fallback(
            self.p.compute,
            self.cluster,
            options,
            None,
            budget_s=self.rb.failover.step_timeout.total_seconds(),
        )
        attempts = tuple(
            f"{a.option.infra}: {'ok' if a.ok else a.error} ({a.seconds:.1f}s)" for a in result.attempts
        )
        return Provisioned(self.cluster, result.cluster.option, attempts)

    def resume(self, cluster: Provisioned, checkpoint: Certified) -> Resumed:
        from lifeboat.resume import parse_loaded, wait_first_step

        started = self.clock()
        self.p.compute.run(cluster.cluster, JobSpec.from_runbook(self.rb, checkpoint.uri))
        first = wait_first_step(
            lambda: self.p.compute.logs(cluster.cluster),
            checkpoint.step,
            timeout_s=self.rb.verify.first_step_timeout.total_seconds(),
            job_alive=lambda: not self.p.compute.status(cluster.cluster).job.finished,
            poll_s=0.2,
        )
        loaded = parse_loaded(self.p.compute.logs(cluster.cluster))
        loaded_at = loaded[1] if loaded and loaded[0] == checkpoint.step else started
        return Resumed(max(loaded_at, started), first.at, first.step)

    def prove(self, cluster: Provisioned, checkpoint: Certified) -> Parity:
        from lifeboat.resume import loss_parity, parse_losses

        v = self.rb.verify
        if not v.parity_steps:
            return Parity(True, 0, "loss parity disabled (parity_steps: 0)")
        if not v.loss_log:
            return Parity(
                True, 0, "no pre-failure loss log in the runbook (verify.loss_log): parity not checked"
            )
        pre = parse_losses(_read_text(self.rb, v.loss_log, self.p.open_store))
        deadline = self.clock() + self.rb.verify.first_step_timeout
        while True:  # wait until the resumed job has logged the steps to compare (or stopped)
            resumed = parse_losses(self.p.compute.logs(cluster.cluster))
            wanted = [s for s in range(checkpoint.step + 1, checkpoint.step + v.parity_steps + 1) if s in pre]
            finished = self.p.compute.status(cluster.cluster).job.finished
            if all(s in resumed for s in wanted) or finished or self.clock() > deadline:
                break
            _sleep(0.2)
        r = loss_parity(pre, resumed, checkpoint.step, v.parity_steps, v.parity_tolerance)
        return Parity(r.passed, r.compared, r.detail)

    def teardown(self, cluster: Provisioned) -> None:
        self.p.compute.teardown(cluster.cluster)


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def _read_text(rb: Runbook, where: str, opener: Callable[[str], Store]) -> str:
    """A loss log given as a path relative to the runbook or as a store URI."""
    if "://" not in where:
        path = rb.resolve(where)
        return path.read_text() if path.exists() else ""
    uri = rb.store_uri(where)
    parent, _, key = uri.rpartition("/")
    return b"".join(opener(parent).read(key)).decode()


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
) -> RunbookSteps:
    return RunbookSteps(
        rb,
        providers or Providers.for_runbook(rb),
        run_id=run_id,
        cluster=cluster_name(rb, drill),
        outage_started_at=outage_started_at,
        detected_at=detected_at,
        evidence=evidence,
        force=force,
    )


def build_ledger(
    rb: Runbook, *, run_id: str, drill: str | None = None, path: str | Path | None = None
) -> RtoLedger:
    """The run's ledger, kept as JSON lines (`LedgerFile`'s default file unless `path`)."""
    sink = LedgerFile(path)
    return RtoLedger.for_runbook(rb, run_id, drill=bool(drill), sink=sink)


def build_gate(rb: Runbook, *, console: str = "wait"):
    """Slack when the runbook names a channel and a bot token is configured
    (`SLACK_BOT_TOKEN`, as for `lifeboat serve`, or the Prefect Secret block `lifeboat-slack-bot-token`);
    otherwise the console, which waits for the UI or `lifeboat approve` (`wait`), or decides
    at once (`approve` / `reject`, for demos and drills)."""
    from flows.approval import ChatGate
    from providers.chat.console import ConsoleChat

    token = _slack_token() if rb.approval.channel and console == "wait" else None
    if token is not None:
        from providers.chat.slack import SlackChat

        return ChatGate(rb, SlackChat(token))
    return ChatGate(rb, ConsoleChat(console))


def _slack_token():
    from pydantic import SecretStr

    if value := os.environ.get("SLACK_BOT_TOKEN"):
        return SecretStr(value)
    try:
        from prefect.blocks.system import Secret

        return SecretStr(Secret.load("lifeboat-slack-bot-token").get())
    except Exception:  # no block, no server: no Slack
        return None
