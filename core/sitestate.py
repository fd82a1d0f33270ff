"""Site state: which site of a runbook is active, at which epoch, and which lineage writes.

The record is the lease (`lifeboat_dr.core.fencing.Lease`) kept in *both* checkpoint stores and
changed only by conditional writes. `read_site_state` reads both and the newest epoch wins,
so it answers while one store is down; `mirror` copies the newest record onto a store that
missed a fence (it was down: a zombie primary's store) with the same conditional write, and
so fences the zombie's writers there too.

Everything that writes checkpoints checks it:

- replication copies from the active site to the standby only (`replication_roles`), and
  `require_active` refuses, in one line, a copy from a site that is no longer active;
- retention and certification judge each checkpoint's lineage (`lineage_problem`): a
  checkpoint counts when its guarded-commit marker is of the active epoch, or was committed
  before its epoch was fenced (`lifeboat_dr.core.fencing.marker_is_fenced_out`); one without a marker
  counts only when written before the job was first fenced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from lifeboat_dr.core.fencing import (
    COMMIT_MARKER,
    SITES,
    Lease,
    marker_is_fenced_out,
    merge_history,
    peek_lease,
    put_lease,
    read_lease,
)
from lifeboat_dr.kernel.errors import (
    LifeboatError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    StopFailover,
)
from lifeboat_dr.providers.storage.base import Store


class RolesFlipped(StopFailover):
    """A copy or a write from a site that is no longer the active one."""


@dataclass(frozen=True)
class SiteState:
    """The newest record found on the runbook's stores."""

    lease: Lease | None  # newest epoch's lease with every store's history merged; None: never fenced
    unreachable: tuple[str, ...] = ()  # store URIs that did not answer
    stale: tuple[str, ...] = ()  # roles whose store holds an older epoch (missed a fence)

    @property
    def active(self) -> str:
        return self.lease.active if self.lease else "primary"

    @property
    def standby(self) -> str:
        return "secondary" if self.active == "primary" else "primary"

    @property
    def epoch(self) -> int:
        return self.lease.epoch if self.lease else 0

    @property
    def lineage(self) -> str:
        return f"{self.active}@{self.epoch}"

    def describe(self) -> str:
        since = f" since run {self.lease.run_id}" if self.lease and self.lease.run_id else ""
        return f"{self.active} is active (epoch {self.epoch}{since})"


def read_site_state(stores: Mapping[str, Store | None]) -> SiteState:
    """The newest record among `{"primary": store, "secondary": store}` (None: unopenable):
    one request per store.

    Raises `ProviderUnavailable` when no store answers."""
    found: dict[str, Lease | None] = {}
    unreachable = []
    for role, store in stores.items():
        if store is None:
            continue
        try:
            found[role] = peek_lease(store)
        except ProviderUnavailable:
            unreachable.append(store.uri)
            continue
    if not found:
        raise ProviderUnavailable(f"no store answered: {', '.join(unreachable) or 'none openable'}")
    leases = [lease for lease in found.values() if lease is not None]
    if not leases:
        return SiteState(None, tuple(unreachable))
    newest = max(leases, key=lambda lease: lease.epoch)
    merged = replace(newest, history=merge_history(*(lease.history for lease in leases)))
    stale = tuple(r for r, lease in found.items() if (lease.epoch if lease else 0) < newest.epoch)
    return SiteState(merged, tuple(unreachable), stale)


def mirror(state: SiteState, stores: Mapping[str, Store | None]) -> list[str]:
    """Write the newest record onto each reachable store that missed it (conditional write,
    so a store that moved on meanwhile is left alone). Returns the store URIs written."""
    if state.lease is None:
        return []
    written = []
    for role in state.stale:
        store = stores.get(role)
        if store is None:
            continue
        try:
            current = read_lease(store)
            if current is not None and current[0].epoch >= state.epoch:
                continue
            carried = replace(
                state.lease,
                commits=0,
                history=merge_history(state.lease.history, current[0].history if current else ()),
            )
            put_lease(store, carried, current[1] if current else None)
            written.append(store.uri)
        except (ProviderUnavailable, PreconditionFailed):
            continue
    return written


def replication_roles(state: SiteState) -> tuple[str, str]:
    """(source, destination) roles: from the active site to the standby."""
    return state.active, state.standby


def require_active(state: SiteState, source: str, runbook: str) -> None:
    """Refuse a copy whose source is not the active site (the roles flipped under it)."""
    if source not in SITES:
        raise LifeboatError(f"unknown site {source!r}: one of {', '.join(SITES)}")
    if source != state.active:
        raise RolesFlipped(
            f"refusing to replicate {runbook} from the {source}: {state.describe()}; "
            f"its checkpoints are not copied over the active site's"
        )


def lineage_problem(
    checkpoint: str, marker: bytes | None, lease: Lease | None, written_at: datetime | None
) -> str | None:
    """Why `checkpoint` is not of the active lineage, or None. `marker` is its guarded-commit
    marker (None: it has none), `lease` the site state's lease.

    With a marker: fenced out by the lease's seals. Without one: it counts only when written
    before the job was first fenced (never fenced: always)."""
    if lease is None:
        return None
    if marker is None:
        if not lease.history:
            return None
        first = lease.history[0].ended_at
        if written_at is not None and written_at < first:
            return None
        return (
            f"{checkpoint}: no guarded-commit marker and written after the job was first fenced "
            f"({first.isoformat()}): not provably of the active lineage {lease.lineage}"
        )
    if marker_is_fenced_out(marker, lease):
        doc = json.loads(marker)
        return (
            f"{checkpoint}: committed by {doc.get('lineage', 'epoch ' + str(doc.get('epoch')))} after that "
            f"lineage was fenced out; the active lineage is {lease.lineage}"
        )
    return None


def read_marker(store: Store, checkpoint: str) -> bytes | None:
    """The guarded-commit marker of a checkpoint directory, or None."""
    try:
        return b"".join(store.read(f"{checkpoint}/{COMMIT_MARKER}"))
    except NotFound:
        return None
