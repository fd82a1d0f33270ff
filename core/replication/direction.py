"""Which way replication goes (from the active site to the standby, by the site state), what
it copies that way, and one pass that way outside Prefect.

`direction` reads the site state (both stores, newest epoch wins; an inconclusive view is
`SiteStateUnknown`: nothing is copied) and refuses, in one line, a source that is not the
active site; `Direction.guard` checks it again before each checkpoint, its markers and the
root pointers. `sources_to_replicate` is the source's committed checkpoints of the active
lineage that the standby's retention would keep. `replicate_by_site_state` is one pass
(a failback's catch-up, the demo); `hand_back` is a failback's last reverse copy, once its
fence made the primary active again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from lifeboat_dr.core.checkpoints.inventory import (
    StoredCheckpoint,
    committed_checkpoints,
    foreign_checkpoints,
)
from lifeboat_dr.core.checkpoints.layouts import Discovery, discover
from lifeboat_dr.core.replication.copying import ReplicationReport, replicate_checkpoints
from lifeboat_dr.core.retention import RetentionPolicy, plan_retention
from lifeboat_dr.core.sitestate import (
    RolesFlipped,
    SiteState,
    catch_up,
    claim,
    read_site_state,
    require_active,
    site_stores,
)
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.base import Store


@dataclass(frozen=True)
class ReplicationSettings:
    """What replication reads of a runbook (flows/wiring.py `replication_settings` builds it)."""

    runbook: str  # the runbook's name: the site state's refusals and the ledger name it
    layout: str  # checkpoint layout ("auto" to detect)
    rpo_target: timedelta  # a replica lagging more is reported as exceeded
    retention: RetentionPolicy  # the standby's; nothing it would delete is copied
    loss_log_key: str | None = None  # the pre-failure loss log's key in the primary store, if there

    def also_copied(self, source_role: str) -> list[str]:
        """Root files copied after the checkpoints: the loss log travels from the primary only."""
        return [self.loss_log_key] if self.loss_log_key and source_role == "primary" else []


@dataclass(frozen=True)
class Direction:
    """Which way replication goes now: from the active site to the standby."""

    source_role: str  # "primary" or "secondary"
    source: Store
    destination: Store
    state: SiteState
    caught_up: tuple[str, ...] = ()  # stores that missed a fence and were given the record now
    sites: Mapping[str, Store | None] = field(default_factory=dict)  # the site state's stores, by role

    def guard(self, runbook: str, stores: Mapping[str, Store | None] | None = None) -> Callable[[], None]:
        """A check to run before each checkpoint (and its markers, and the pointers): the
        site state (`stores`, default `sites`) is still conclusive, at the epoch the copy was
        planned under, with the source active. Every call reads the site state again: the
        first one too, since a copy retried after a failed attempt (the task's retries, 30 s
        apart) must not trust a reading from before a fence that landed meanwhile."""
        stores = stores if stores is not None else self.sites

        def check() -> None:
            now = read_site_state(stores, runbook=runbook)
            require_active(now, self.source_role, runbook)
            if now.epoch != self.state.epoch:
                raise RolesFlipped(
                    f"refusing to replicate {runbook} further: the site state changed under the copy "
                    f"(epoch {self.state.epoch} -> {now.epoch}); the next run copies by the new one"
                )

        return check


def direction(
    runbook: str,
    primary: Store | None,
    secondary: Store | None,
    *,
    source: str = "active",
    dry_run: bool = False,
    witness: Store | None = None,
) -> Direction:
    """Replication's direction for `runbook` (its name) by the site state (both stores and
    the `witness`, if any; newest epoch wins). `SiteStateUnknown` when the view is not
    conclusive, `StopFailover` when the stores hold another runbook's site state.

    A store that missed a fence (it was down: a zombie primary's) is given the newest record
    first, conditionally, so its writers' next guarded commit stops them, and a store whose
    site state names no runbook is given this one's name (not in a dry run). `source` pins
    the source site: `RolesFlipped` (one line) when it is not the active one."""
    stores = site_stores(primary, secondary, witness)
    state = read_site_state(stores, runbook=runbook)
    caught_up = () if dry_run else tuple(catch_up(state, stores))  # even when refusing: it fences the zombie
    role = state.active if source == "active" else source
    require_active(state, role, runbook)
    if not dry_run:
        claim(state, stores, runbook)
    src, dst = stores[role], stores["secondary" if role == "primary" else "primary"]
    if src is None or dst is None:
        raise ProviderUnavailable(
            f"{runbook}: the {role if src is None else 'standby'} store cannot be opened"
        )
    return Direction(role, src, dst, state, caught_up, stores)


def worth_replicating(policy: RetentionPolicy, sources: Iterable[StoredCheckpoint]) -> list[StoredCheckpoint]:
    """The primary's checkpoints that the secondary's retention `policy` would keep: copying
    one it deletes straight after would only churn."""
    verdicts = plan_retention(sources, keep_last=policy.keep_last, keep_every=policy.keep_every)
    return [v.checkpoint for v in verdicts if v.keep]


def sources_to_replicate(
    settings: ReplicationSettings, way: Direction, found: Discovery | None = None
) -> list[StoredCheckpoint]:
    """The source's committed checkpoints of the active lineage that retention would keep.
    `found`: the discovery of the source already taken (it is listed once per run)."""
    found = found or discover(way.source, settings.layout)
    foreign = foreign_checkpoints(way.source, way.destination, settings.layout, found, way.state.lease)
    committed = [
        c
        for c in committed_checkpoints(way.source, settings.layout, found)
        if c.prefix.strip("/") not in foreign
    ]
    return worth_replicating(settings.retention, committed)


def replicate_by_site_state(
    settings: ReplicationSettings,
    primary: Store | None,
    secondary: Store | None,
    *,
    dry_run: bool = False,
    witness: Store | None = None,
) -> tuple[Direction, ReplicationReport]:
    """One replication pass the way the site state says, outside Prefect (a failback's
    catch-up, the demo): the `replicate` flow's copy without its lag events and retention."""
    way = direction(settings.runbook, primary, secondary, dry_run=dry_run, witness=witness)
    report = replicate_checkpoints(
        way.source,
        way.destination,
        sources_to_replicate(settings, way),
        rpo_target=settings.rpo_target,
        dry_run=dry_run,
        guard=way.guard(settings.runbook),
        also=settings.also_copied(way.source_role),
    )
    return way, report


def hand_back(
    settings: ReplicationSettings,
    primary: Store | None,
    secondary: Store | None,
    *,
    witness: Store | None = None,
) -> ReplicationReport:
    """A failback's last reverse copy, once its fence made the primary active: the checkpoints
    the secondary's job committed before that fence, to the primary. Only the lineage the
    fence sealed counts (`foreign_checkpoints`): a commit that lost to the fence stays where
    it is. `RolesFlipped` (one line) unless the primary is the active site now."""
    stores = site_stores(primary, secondary, witness)
    state = read_site_state(stores, runbook=settings.runbook)
    require_active(state, "primary", settings.runbook)
    if primary is None or secondary is None:
        raise ProviderUnavailable(f"{settings.runbook}: a failback's stores cannot both be opened")
    way = Direction("secondary", secondary, primary, state, sites=stores)
    return replicate_checkpoints(
        secondary, primary, sources_to_replicate(settings, way), rpo_target=settings.rpo_target
    )
