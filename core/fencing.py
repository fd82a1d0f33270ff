"""Fencing: a lease with an epoch per protected job, bumped by conditional writes.

Leader election is not fencing; storage is. Each checkpoint store holds
`_lifeboat/lease.json`: the epoch, the site that is active under it (`primary` or
`secondary`), the run that took it, how many guarded commits landed under it, and how each
earlier epoch ended (`Seal`). Every change is a conditional write (create-only when there is
no lease yet, if-match on the version read otherwise), so of racing failovers that saw the
same epoch exactly one wins; the others get `StopFailover`. Re-running the same failover run
(same `run_id`) finds its own lease and does not bump twice.

Guarded commits go through the lease too: a writer holding epoch E bumps the lease's commit
count by an if-match write while the epoch is still E, and only then writes its checkpoint's
marker (create-only), carrying its sequence number. A fence bumps the epoch by an if-match
write on the same object, sealing the old epoch at the commit count it read. The two writes
are ordered by the store, so a marker counts exactly when its commit's conditional write
landed before the fence's: `seq <= seal.commits` (no clocks involved). A writer whose
commit write lost gets `StopFailover` and writes no marker.

Where the fence could not reach the writers' store (the outage itself: a partition), the
seal has no commit count and the fence's time is the cut: a marker of that epoch counts
when it was written before the fence (`Seal.commits is None`).

In a training loop use `lifeboat_dr.core.commit.commit_or_exit` (it reads `LIFEBOAT_EPOCH`).

Backends that do not honour preconditions (the GCS emulator ignores `ifGenerationMatch`)
state it in `Capabilities.conditional_writes`; `fence` refuses them rather than pretend.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from lifeboat_dr.kernel.errors import (
    ConfigError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    StopFailover,
)
from lifeboat_dr.providers.storage.base import Store

LEASE_KEY = "_lifeboat/lease.json"
COMMIT_MARKER = "lifeboat-commit.json"  # the guarded-commit marker inside a checkpoint directory
SITES = ("primary", "secondary")
COMMIT_TRIES = 200  # if-match retries of one guarded commit against other writers' commits

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Seal:
    """How an epoch ended: which of its guarded commits count."""

    epoch: int
    active: str  # the site that wrote under it
    ended_at: datetime  # when the next epoch's fence was taken
    commits: int | None  # commits that landed before the fence; None: the writers' store was unreachable

    def to_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "active": self.active,
            "ended_at": self.ended_at.isoformat(),
            "commits": self.commits,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> Seal:
        commits = doc.get("commits")
        return cls(
            int(doc["epoch"]),
            str(doc["active"]),
            datetime.fromisoformat(doc["ended_at"]),
            None if commits is None else int(commits),
        )


@dataclass(frozen=True)
class Lease:
    """Who may write a job's checkpoints: the holder of the highest epoch, at the active site."""

    epoch: int  # 0 = the original primary, never fenced; each failover or failback adds one
    holder: str  # e.g. "lifeboat:llama-dr"
    run_id: str  # the run that took it ("" for the primary's initial lease)
    acquired_at: datetime
    active: str = "primary"  # the site whose job writes under this epoch
    commits: int = 0  # guarded commits under this epoch on this store
    history: tuple[Seal, ...] = ()  # how each earlier epoch ended, oldest first

    @property
    def lineage(self) -> str:
        """The active lineage's name, e.g. "secondary@1"."""
        return f"{self.active}@{self.epoch}"

    def seal(self, epoch: int) -> Seal | None:
        return next((s for s in self.history if s.epoch == epoch), None)

    def to_json(self) -> bytes:
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "acquired_at": self.acquired_at.isoformat(),
            "history": [s.to_dict() for s in self.history],
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Lease:
        doc = json.loads(data)
        return cls(
            epoch=int(doc["epoch"]),
            holder=str(doc["holder"]),
            run_id=str(doc.get("run_id", "")),
            acquired_at=datetime.fromisoformat(doc["acquired_at"]),
            active=str(doc.get("active", "primary")),
            commits=int(doc.get("commits", 0)),
            history=tuple(Seal.from_dict(s) for s in doc.get("history", ())),
        )


def merge_history(*histories: Iterable[Seal]) -> tuple[Seal, ...]:
    """One seal per epoch, oldest first; a seal with an exact commit count wins over a cut by time."""
    best: dict[int, Seal] = {}
    for seal in (s for h in histories for s in h):
        if seal.epoch not in best or (best[seal.epoch].commits is None and seal.commits is not None):
            best[seal.epoch] = seal
    return tuple(best[e] for e in sorted(best))


def read_lease(store: Store) -> tuple[Lease, str] | None:
    """The current lease and its version token, or None when the store has none."""
    # The version we if-match on must be the one we read: re-head after reading and retry
    # on a concurrent rewrite instead of pairing new bytes with an old token.
    for _ in range(10):
        try:
            info = store.head(LEASE_KEY)
            data = b"".join(store.read(LEASE_KEY))
            if store.head(LEASE_KEY).version == info.version:
                return _parse_lease(store, data), info.version
        except NotFound:
            return None
    raise ProviderUnavailable(f"{store.uri}/{LEASE_KEY} keeps changing while we read it")


def _parse_lease(store: Store, data: bytes) -> Lease:
    """The lease in `data`; a record that is not one (hand-edited, truncated, forged) stops
    whoever reads it with one line naming it: nothing may act on a site state it cannot read."""
    try:
        lease = Lease.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        why = f"{type(e).__name__}: {e}".splitlines()[0][:120]
    else:
        if lease.active in SITES:
            return lease
        why = f"active site {lease.active!r} is neither {' nor '.join(SITES)}"
    raise StopFailover(
        f"{store.uri.rstrip('/')}/{LEASE_KEY} is not a readable site state ({why}); "
        "nothing acts on it until it is restored (the other store's copy, or by hand)"
    )


def peek_lease(store: Store) -> Lease | None:
    """The current lease, or None when the store has none: one request (a GET; a missing
    lease is its 404). For reading the site state; a conditional write needs `read_lease`'s
    version token. An unreadable record stops the reader as in `read_lease`."""
    try:
        data = b"".join(store.read(LEASE_KEY))
    except NotFound:
        return None
    return _parse_lease(store, data)


def put_lease(store: Store, new: Lease, version: str | None) -> None:
    """Write `new` if the lease is still at `version` (None: if there is none yet)."""
    condition = {"if_match": version} if version is not None else {"if_none_match": True}
    store.put(LEASE_KEY, new.to_json(), **condition)


def _bump(
    store: Store, run_id: str, expect_epoch: int | None, make: Callable[[Lease | None], Lease]
) -> Lease:
    """Write `make(current)` over the store's lease by a conditional write. Retries when only
    the commit count moved (a guarded commit landed first); stops when another run moved the
    epoch. Idempotent per `run_id`."""
    if not store.capabilities.conditional_writes:
        raise ConfigError(
            f"{store.uri}: this store does not honour conditional writes; it cannot fence a job"
        )
    while True:
        current = read_lease(store)
        lease, version = current if current else (None, None)
        if lease is not None and lease.run_id == run_id:
            return lease
        epoch = lease.epoch if lease else 0
        if expect_epoch is not None and epoch != expect_epoch:
            who = f" (held by {lease.holder}, run {lease.run_id})" if lease else ""
            raise StopFailover(
                f"{store.uri}: the lease is at epoch {epoch}{who}, not {expect_epoch}: "
                "another failover already fenced this job"
            )
        new = make(lease)
        if lease is not None and lease.epoch >= new.epoch:
            raise StopFailover(f"{store.uri}: lost the fencing race to {lease.holder} (run {lease.run_id})")
        try:
            put_lease(store, new, version)
            return new
        except PreconditionFailed:
            winner = read_lease(store)
            if winner is not None and winner[0].run_id == run_id:  # our own earlier try landed
                return winner[0]
            if winner is not None and winner[0].epoch == epoch:  # only a commit landed: try again
                continue
            who = f"{winner[0].holder} (run {winner[0].run_id}, epoch {winner[0].epoch})" if winner else "?"
            raise StopFailover(f"{store.uri}: lost the fencing race to {who}") from None


def _next(
    lease: Lease | None,
    *,
    active: str,
    holder: str,
    run_id: str,
    now: datetime,
    floor: Lease | None = None,
    exact: bool = True,
    expect: int | None = None,
) -> Lease:
    """The lease after the current epoch ends. `lease` is what this store holds, `floor` what
    the other store holds; the newest epoch of the two is the one that ends. Its seal counts
    commits only when `exact` (this is the store its writers committed to) and this store
    is at that epoch; otherwise the fence's time is the cut."""
    old = lease or Lease(0, "", "", now)
    top = max(old.epoch, floor.epoch if floor else 0)
    if expect is not None and top != expect:
        raise StopFailover(
            f"the job is at epoch {top}, not {expect}: another failover already fenced this job"
        )
    ending = old if old.epoch == top or floor is None else floor
    commits = old.commits if exact and old.epoch == top else None
    history = merge_history(old.history, floor.history if floor else ())
    ended = Seal(top, ending.active, now, commits)
    return Lease(top + 1, holder, run_id, now, active, 0, merge_history(history, (ended,)))


def fence(
    store: Store,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    active: str = "secondary",
    clock: Clock = _utcnow,
) -> Lease:
    """Take the job's lease on one store for run `run_id`: epoch + 1, `active` the site that
    writes from now on, the old epoch sealed at the commit count read.

    `expect_epoch` is the epoch this run saw when it confirmed the outage: if another run
    already moved past it, this one stops instead of fencing *that* one out. Raises
    `StopFailover` when another run holds or wins the lease, `ConfigError` for a store that
    cannot do conditional writes."""
    return _bump(
        store,
        run_id,
        expect_epoch,
        lambda lease: _next(lease, active=active, holder=holder, run_id=run_id, now=clock()),
    )


def fence_job(
    to_store: Store,
    from_store: Store | None,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    active: str = "secondary",
    clock: Clock = _utcnow,
) -> tuple[Lease, Lease | None]:
    """Make `active` the active site: fence the store its writers used until now
    (`from_store`) when it answers, then the store of the site taking over (`to_store`, must
    succeed), with one and the same lease.

    The old site's store goes first: that is where its writers' commits race the fence, so
    the seal's commit count is exact. When it does not answer (the outage), the lease on
    `to_store` seals the old epoch by time, and `lifeboat_dr.core.sitestate.mirror` writes the lease
    there once it answers again. Returns both leases (the second None when unreachable)."""
    if active not in SITES:
        raise ConfigError(f"active site must be one of {', '.join(SITES)}, not {active!r}")
    mine = read_lease(to_store)
    if mine is not None and mine[0].run_id == run_id:  # a retried run: finish the mirror only
        return mine[0], _mirror_one(from_store, mine[0], run_id)
    floor = mine[0] if mine else None
    taken: Lease | None = None
    if from_store is not None:
        try:
            taken = _bump(
                from_store,
                run_id,
                None,
                lambda lease: _next(
                    lease,
                    active=active,
                    holder=holder,
                    run_id=run_id,
                    now=clock(),
                    floor=floor,
                    expect=expect_epoch,
                ),
            )
        except ProviderUnavailable:
            taken = None
    if taken is None:  # the old site's store does not answer: cut its epoch by time
        lease = _bump(
            to_store,
            run_id,
            None,
            lambda cur: _next(
                cur,
                active=active,
                holder=holder,
                run_id=run_id,
                now=clock(),
                exact=False,
                expect=expect_epoch,
            ),
        )
        return lease, None
    lease = _bump(to_store, run_id, None, lambda cur: _carry(taken, cur))
    return lease, taken


def _carry(lease: Lease, current: Lease | None) -> Lease:
    """`lease` as written on another store, keeping what this store knows of older epochs."""
    return dataclasses.replace(
        lease, history=merge_history(lease.history, current.history if current else ())
    )


def _mirror_one(store: Store | None, lease: Lease, run_id: str) -> Lease | None:
    if store is None:
        return None
    try:
        return _bump(store, run_id, None, lambda cur: _carry(lease, cur))
    except (ProviderUnavailable, StopFailover):
        return None


def check_lease(store: Store, my_epoch: int) -> Lease | None:
    """For training jobs: raise `StopFailover` if a failover fenced us out (the lease moved
    past `my_epoch`). Returns the current lease (None when never fenced and `my_epoch` is 0)."""
    current = read_lease(store)
    epoch = current[0].epoch if current else 0
    if epoch != my_epoch:
        raise StopFailover(_fenced_out(store, current[0] if current else None, my_epoch))
    return current[0] if current else None


def _fenced_out(store: Store, lease: Lease | None, my_epoch: int) -> str:
    who = f" by {lease.holder} (run {lease.run_id}), {lease.active} is active" if lease else ""
    epoch = lease.epoch if lease else 0
    return (
        f"{store.uri}: fenced out{who}: lease epoch is {epoch}, this writer holds {my_epoch}; "
        "stop writing checkpoints"
    )


def marker_body(my_epoch: int, step: int, seq: int, active: str, clock: Clock = _utcnow) -> bytes:
    doc = {"epoch": my_epoch, "step": step, "seq": seq, "lineage": f"{active}@{my_epoch}"}
    return json.dumps(doc | {"written_at": clock().isoformat()}).encode()


def guarded_commit(store: Store, marker_key: str, my_epoch: int, step: int, *, clock: Clock = _utcnow) -> int:
    """Commit a checkpoint: count it in the lease while the epoch is `my_epoch` (if-match),
    then write its marker create-only. Returns the commit's sequence number.

    Raises `StopFailover` (nothing written) when the lease moved past `my_epoch`, and
    `PreconditionFailed` when the marker already exists (a retry, or a second writer)."""
    try:
        store.head(marker_key)
        raise PreconditionFailed(f"{store.uri}/{marker_key}: already committed")
    except NotFound:
        pass
    for _ in range(COMMIT_TRIES):
        current = read_lease(store)
        lease, version = current if current else (None, None)
        if (lease.epoch if lease else 0) != my_epoch:
            raise StopFailover(_fenced_out(store, lease, my_epoch))
        base = lease or Lease(0, "", "", clock())
        counted = dataclasses.replace(base, commits=base.commits + 1)
        try:
            put_lease(store, counted, version)
            break
        except PreconditionFailed:
            continue  # another commit, or a fence: read again
    else:
        raise ProviderUnavailable(f"{store.uri}/{LEASE_KEY}: {COMMIT_TRIES} commits in a row lost the race")
    store.put(
        marker_key, marker_body(my_epoch, step, counted.commits, counted.active, clock), if_none_match=True
    )
    return counted.commits


def marker_is_fenced_out(marker: bytes, lease: Lease | None) -> bool:
    """Whether certification must ignore a commit marker: not of the active lineage and not
    committed before its epoch was fenced (its commit lost to the fence, or by a writer that
    kept writing where the fence could not reach: a zombie primary)."""
    if lease is None:
        return False
    doc = json.loads(marker)
    epoch = int(doc.get("epoch", 0))
    if epoch >= lease.epoch:
        return False
    seal = lease.seal(epoch)
    if seal is None:  # a lease from before seals were recorded: nothing proves it counted
        return True
    if seal.commits is not None and "seq" in doc:
        return int(doc["seq"]) > seal.commits
    written = doc.get("written_at")
    return written is None or datetime.fromisoformat(written) >= seal.ended_at
