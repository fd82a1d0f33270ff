"""Site state: which site of a runbook is active, at which epoch, and which lineage writes.

The record is the lease (`lifeboat_dr.core.fencing.Lease`) kept in *both* checkpoint stores
(and, when the runbook names one, a third *witness* store) and changed only by conditional
writes. `read_site_state` reads each; the newest epoch wins.

Unknown is not "no": a store that does not answer is *unknown*, never "no lease". Every
fence writes the store of the site taking over, and a failback also the secondary's (with a
witness: a majority of the three), so the secondary's store always holds the newest lease. A
view is therefore conclusive exactly when the secondary's store answered (with a witness:
when a majority answered); the primary's store alone never is (it may have missed a
failover's fence). `read_site_state` refuses an inconclusive view with `SiteStateUnknown`
(one line naming the stores; exit 75, retry): replication, retention, certification,
fencing and failback all read the site state through it and act only on a conclusive one.

A lease names its runbook: a lease of another runbook on the prefix stops the reader.

`catch_up` copies the newest record onto a store that missed a fence (it was down: a zombie
primary's store) with the same conditional write, and so fences the zombie's writers there.

Everything that writes checkpoints checks it:

- replication copies from the active site to the standby only (`replication_roles`), and
  `require_active` refuses, in one line, a copy from a site that is no longer active;
- retention and certification judge each checkpoint's lineage (`lineage_problem`): a
  checkpoint counts when its guarded-commit marker is of the active epoch, or among the
  commits its epoch's seal counts (`lifeboat_dr.core.fencing.marker_is_fenced_out`); one
  without a marker counts only when written before the job was first fenced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from lifeboat_dr.core.fencing import (
    COMMIT_MARKER,
    SITES,
    Lease,
    another_runbook,
    marker_is_fenced_out,
    merge_history,
    new_counter,
    peek_lease,
    put_lease,
    read_lease,
)
from lifeboat_dr.kernel.errors import (
    LifeboatError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    SiteStateUnknown,
    StopFailover,
)
from lifeboat_dr.providers.storage.base import Store


class RolesFlipped(StopFailover):
    """A copy or a write from a site that is no longer the active one."""


ROLES = (*SITES, "witness")


@dataclass(frozen=True)
class SiteState:
    """The newest record found on the runbook's stores."""

    lease: Lease | None  # newest epoch's lease with every store's history merged; None: never fenced
    unreachable: tuple[str, ...] = ()  # the stores that did not answer (or cannot be opened), one line each
    stale: tuple[str, ...] = ()  # roles whose store holds an older epoch (missed a fence)
    answered: tuple[str, ...] = ()  # roles whose store answered
    witnessed: bool = False  # a witness store is configured: a majority of the three decides
    leases: Mapping[str, Lease | None] = field(
        default_factory=dict, compare=False, repr=False
    )  # as read, by role

    @property
    def conclusive(self) -> bool:
        """Whether this view can be acted on: the secondary's store answered (with a witness:
        a majority of the three)."""
        if self.witnessed:
            return len(self.answered) * 2 > len(ROLES)
        return "secondary" in self.answered

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


def site_stores(
    primary: Store | None, secondary: Store | None, witness: Store | None = None
) -> dict[str, Store | None]:
    """The stores that hold a runbook's site state, by role (the witness only when there is one)."""
    stores: dict[str, Store | None] = {"primary": primary, "secondary": secondary}
    if witness is not None:
        stores["witness"] = witness
    return stores


def read_site_state(stores: Mapping[str, Store | None], *, runbook: str = "") -> SiteState:
    """The newest record among `{"primary": store, "secondary": store}` and, when the runbook
    has one, `"witness"` (None: cannot be opened): one request per store.

    Raises `SiteStateUnknown` (one line naming the stores that did not answer) unless the
    view is conclusive (see the module docstring). `runbook`: a lease naming another
    runbook stops the reader (`StopFailover`, one line)."""
    unknown = [r for r in stores if r not in ROLES]
    if unknown:
        raise ValueError(f"site state roles are {', '.join(ROLES)}, not {', '.join(unknown)}")
    found: dict[str, Lease | None] = {}
    unreachable = []
    for role, store in stores.items():
        if store is None:
            unreachable.append(f"the {role}'s store (cannot be opened)")
            continue
        try:
            found[role] = peek_lease(store)
        except ProviderUnavailable as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            unreachable.append(f"{store.uri} ({why[:160]})")
    for role, lease in found.items():
        if lease is not None and runbook and lease.runbook and lease.runbook != runbook:
            raise StopFailover(another_runbook(stores[role], lease, runbook))
    leases = [lease for lease in found.values() if lease is not None]
    newest = max(leases, key=lambda lease: lease.epoch) if leases else None
    merged = replace(newest, history=merge_history(*(lease.history for lease in leases))) if newest else None
    top = newest.epoch if newest else 0
    stale = tuple(r for r, lease in found.items() if (lease.epoch if lease else 0) < top)
    state = SiteState(merged, tuple(unreachable), stale, tuple(found), "witness" in stores, found)
    if not state.conclusive:
        needed = "a majority of the three stores" if state.witnessed else "the secondary's store"
        raise SiteStateUnknown(
            f"the site state is unknown: {'; '.join(unreachable)} did not answer, and without "
            f"{needed} it is not known which site is active; nothing was written or deleted, retry"
        )
    return state


def catch_up(state: SiteState, stores: Mapping[str, Store | None]) -> list[str]:
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
                last_commit="",
                counter=new_counter(),
                history=merge_history(state.lease.history, current[0].history if current else ()),
            )
            put_lease(store, carried, current[1] if current else None)
            written.append(store.uri)
        except (ProviderUnavailable, PreconditionFailed):
            continue
    return written


def claim(state: SiteState, stores: Mapping[str, Store | None], runbook: str) -> list[str]:
    """Name `runbook` in the site state of each store that answered and holds no lease, or
    an unnamed one (conditional writes; a store that moved meanwhile is left for the next
    run). From then on a second runbook reading the prefix stops. Returns the URIs written."""
    written = []
    for role in state.answered:
        store, seen = stores.get(role), state.leases.get(role)
        if store is None or (seen is not None and seen.runbook):
            continue  # named already (as read): nothing to write
        try:
            current = read_lease(store) if seen is not None else None
            if current is None:
                base = state.lease or Lease(0, "", "", datetime.now(UTC))
                named = replace(base, commits=0, runbook=runbook, last_commit="", counter=new_counter())
                put_lease(store, named, None)
            elif not current[0].runbook:
                put_lease(store, replace(current[0], runbook=runbook), current[1])
            else:
                continue
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
