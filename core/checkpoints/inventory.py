"""What checkpoints a store holds: each with its step, whether it committed, and whether it
is of the active lineage.

Copying (core/replication/) and retention (core/retention.py) both read a store through
here: `stored_checkpoints` (complete or not, by the layout's commit protocol),
`committed_checkpoints` (the complete ones) and `foreign_checkpoints` (the ones a fenced-out
writer committed, by the site state: never copied, never counted). Each takes the
discovery of the store already taken for this run (`found`) so that it lists nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass

from lifeboat_dr.core.checkpoints.layouts import Discovery, discover
from lifeboat_dr.core.checkpoints.protocols import incomplete_reason
from lifeboat_dr.core.fencing import COMMIT_MARKER, Lease
from lifeboat_dr.core.sitestate import lineage_problem, read_marker, read_site_state, site_stores
from lifeboat_dr.providers.storage.base import Store


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint directory in a store, as copying and retention see it."""

    prefix: str  # key prefix relative to the store root, e.g. "run/step-1200"
    step: int
    complete: bool = True  # committed by its layout's protocol (its commit marker is present)


def stored_checkpoints(
    store: Store, layout: str = "auto", found: Discovery | None = None
) -> list[StoredCheckpoint]:
    """Checkpoints in `store` by its layout (top-level directories), newest step first, each
    marked complete or not (lifeboat_dr.core.checkpoints.protocols). `found`: a discovery of
    `store` already taken (no second listing)."""
    found = found or discover(store, layout)
    return [
        StoredCheckpoint(
            d.name, d.step, complete=incomplete_reason(store, found.layout, d, found.pointers) is None
        )
        for d in found.checkpoints
    ]


def committed_checkpoints(
    store: Store, layout: str = "auto", found: Discovery | None = None
) -> list[StoredCheckpoint]:
    """The complete (committed) checkpoints in `store`, newest step first."""
    return [c for c in stored_checkpoints(store, layout, found) if c.complete]


_READ = object()  # foreign_checkpoints' default: read the site state from the stores


def foreign_checkpoints(
    store: Store,
    other: Store | None,
    layout: str = "auto",
    found: Discovery | None = None,
    lease: Lease | None | object = _READ,
    sites=None,
) -> dict[str, str]:
    """Checkpoints in `store` that are not of the active lineage (the site state's `lease`;
    by default read from `sites`, the stores by role, or with `store` the secondary's and
    `other` the primary's): prefix -> why. Empty when the job was never fenced. `found`:
    the discovery of `store` already taken."""
    if lease is _READ:
        lease = read_site_state(sites if sites is not None else site_stores(other, store)).lease
    if lease is None:
        return {}
    out = {}
    for d in (found or discover(store, layout)).checkpoints:
        marker = read_marker(store, d.name) if COMMIT_MARKER in d.markers else None
        if why := lineage_problem(d.name, marker, lease, d.newest):
            out[d.name] = why
    return out
