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
landed before the fence's: `seq <= seal.commits` (no clocks involved). A count is only
meaningful on the lease object that kept it: each lease that starts counting (created, a new
epoch, copied onto another store) mints a `counter` token, markers carry it, and a seal names
the counter it counted, so commits counted on another lease object of the same epoch (a
second store the zombie's job committed to) never pass for sealed ones. A writer whose
commit write lost gets `StopFailover` and writes no marker.

Where the fence cannot reach the writers' store (the outage itself: a partition), it seals
the old epoch at the highest commit sequence of that epoch the taking-over store holds
(every guarded-commit marker carries its `seq`, and replication copies markers): what the
failover can resume from counts, a zombie's later commits do not, and no clock is read.
Seal and lease times are the taking-over store's own clock (core/clocks.py).

Which stores a fence must write: always the store of the site taking over; a failback also
the secondary's (or, with a witness store, a majority of the three), so the secondary's
store always holds the newest lease and a reader that heard from it (or from a majority)
knows the site state (core/sitestate.py). A lease names its runbook: a fence or a reader of
another runbook on the same prefix stops.

A guarded commit whose answer is lost (a reset after the write landed) reads back what it
wrote: the lease's count and its marker. Only a real refusal stops the writer.

In a training loop use `lifeboat_dr.core.commit.commit_or_exit` (it reads `LIFEBOAT_EPOCH`).

Backends that do not honour preconditions (the GCS emulator ignores `ifGenerationMatch`)
state it in `Capabilities.conditional_writes`; `fence` refuses them rather than pretend.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from lifeboat_dr.kernel.errors import (
    ConfigError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    SiteStateUnknown,
    StopFailover,
)
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

LEASE_KEY = "_lifeboat/lease.json"
COMMIT_MARKER = "lifeboat-commit.json"  # the guarded-commit marker inside a checkpoint directory
SITES = ("primary", "secondary")
COMMIT_TRIES = 200  # if-match retries of one guarded commit against other writers' commits
READ_BACK_TRIES = 5  # reads of what a write whose answer was lost left, before "unknown"

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Seal:
    """How an epoch ended: which of its guarded commits count."""

    epoch: int
    active: str  # the site that wrote under it
    ended_at: datetime  # when the next epoch's fence was taken (the taking-over store's clock)
    commits: int | None  # commits of that epoch that count: seq <= commits; None: a seal
    # written before seals were counted (cut by a clock): nothing proves any of its commits
    basis: str = "fence"  # "fence": the count read on the writers' store as the fence took
    # it (exact); "replicated": the writers' store was unreachable, the highest commit of
    # the epoch the taking-over store held; "resumed": the commit the next lineage resumed
    # from (its later commits, landed before the fence or not, are a branch it never continued)
    counter: str = ""  # the lease counter those commits were counted on ("": any, a seal from before)
    run_id: str = ""  # the run that took the epoch this seal ends ("": the original primary, or older)

    def to_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "active": self.active,
            "ended_at": self.ended_at.isoformat(),
            "commits": self.commits,
            "basis": self.basis,
            "counter": self.counter,
            "run_id": self.run_id,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> Seal:
        commits = doc.get("commits")
        return cls(
            int(doc["epoch"]),
            str(doc["active"]),
            datetime.fromisoformat(doc["ended_at"]),
            None if commits is None else int(commits),
            str(doc.get("basis", "fence")),
            str(doc.get("counter", "")),
            str(doc.get("run_id", "")),
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
    runbook: str = ""  # the runbook this job's site state belongs to ("": not named yet)
    last_commit: str = ""  # the marker key of the commit that last counted (a lost reply's read-back)
    counter: str = ""  # this lease object's count of this epoch: minted when it starts counting

    @property
    def lineage(self) -> str:
        """The active lineage's name, e.g. "secondary@1"."""
        return f"{self.active}@{self.epoch}"

    def seal(self, epoch: int) -> Seal | None:
        return next((s for s in self.history if s.epoch == epoch), None)

    def ended_for(self, run_id: str) -> Seal | None:
        """The seal of an epoch `run_id` took and a later fence ended (None: it took none, or
        it holds this lease)."""
        if not run_id or self.run_id == run_id:
            return None
        return next((s for s in self.history if s.run_id == run_id), None)

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
            runbook=str(doc.get("runbook", "")),
            last_commit=str(doc.get("last_commit", "")),
            counter=str(doc.get("counter", "")),
        )


_BASIS_RANK = {"resumed": 3, "fence": 2, "replicated": 1}  # a legacy seal (no count) ranks lowest


def new_counter() -> str:
    """A token for a lease that starts counting commits (see the module docstring)."""
    return uuid.uuid4().hex[:16]


def merge_history(*histories: Iterable[Seal]) -> tuple[Seal, ...]:
    """One seal per epoch, oldest first; a count read on the writers' store at the fence
    wins over one taken from replicated markers, which wins over a legacy cut by time."""
    best: dict[int, Seal] = {}

    def rank(seal: Seal) -> int:
        return 0 if seal.commits is None else _BASIS_RANK.get(seal.basis, 0)

    for seal in (s for h in histories for s in h):
        held = best.get(seal.epoch)
        lower = held is not None and rank(seal) == rank(held) == 3 and seal.commits < held.commits
        if held is None or rank(seal) > rank(held) or lower:  # a rollback resumed from an older one
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


def put_lease(store: Store, new: Lease, version: str | None) -> ObjectInfo:
    """Write `new` if the lease is still at `version` (None: if there is none yet); returns
    the write's answer (its `updated` is the store's clock). A store that cannot take the
    write (a full disk) is `ProviderUnavailable` naming it: retryable."""
    condition = {"if_match": version} if version is not None else {"if_none_match": True}
    try:
        return store.put(LEASE_KEY, new.to_json(), **condition)
    except OSError as e:
        raise ProviderUnavailable(f"{store.uri}/{LEASE_KEY}: cannot write: {e.strerror or e}") from None


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


def _owned(store: Store, lease: Lease | None, runbook: str) -> None:
    """Stop when `store`'s lease belongs to another runbook (two runbooks on one prefix)."""
    if lease is not None and runbook and lease.runbook and lease.runbook != runbook:
        raise StopFailover(another_runbook(store, lease, runbook))


def another_runbook(store: Store, lease: Lease, runbook: str) -> str:
    return (
        f"{store.uri.rstrip('/')}/{LEASE_KEY} is the site state of runbook {lease.runbook}, not {runbook}: "
        "two runbooks share this prefix; give each its own store (lifeboat validate A.yaml B.yaml)"
    )


def _next(
    lease: Lease | None,
    *,
    active: str,
    holder: str,
    run_id: str,
    now: datetime,
    floor: Lease | None = None,
    exact: bool = True,
    replicated: Callable[[int], int] | None = None,
    expect: int | None = None,
    runbook: str = "",
    resumes: tuple[int, int, str] | None = None,
) -> Lease:
    """The lease after the current epoch ends. `lease` is what this store holds, `floor` what
    the other store holds; the newest epoch of the two is the one that ends. Its seal counts
    the commits this store counted when `exact` (this is the store its writers committed to)
    and it is at that epoch; otherwise `replicated(epoch)`: the highest commit of that epoch
    the taking-over store holds."""
    old = lease or Lease(0, "", "", now)
    top = max(old.epoch, floor.epoch if floor else 0)
    if expect is not None and top != expect:
        raise StopFailover(
            f"the job is at epoch {top}, not {expect}: another failover already fenced this job"
        )
    ending = old if old.epoch == top or floor is None else floor
    if exact and old.epoch == top:
        ended = Seal(top, ending.active, now, old.commits, "fence", old.counter, ending.run_id)
    else:
        commits, counter = replicated(top) if replicated else (0, "")
        ended = Seal(top, ending.active, now, commits, "replicated", counter, ending.run_id)
    if (
        resumes is not None
        and resumes[0] == top
        and ended.commits is not None
        and resumes[1] <= ended.commits
    ):
        # what counts: up to the commit resumed from (never more than the seal counted)
        ended = dataclasses.replace(ended, commits=resumes[1], basis="resumed", counter=resumes[2])
    history = merge_history(old.history, floor.history if floor else (), (ended,))
    named = runbook or old.runbook or (floor.runbook if floor else "")
    return Lease(top + 1, holder, run_id, now, active, 0, history, named, counter=new_counter())


def highest_commit(store: Store, epoch: int) -> tuple[int, str]:
    """The highest commit sequence of `epoch` among the guarded-commit markers `store` holds,
    and the lease counter it was counted on ((0, ""): none). One listing, one read per marker."""
    best: tuple[int, str] = (0, "")
    for info in store.list():
        if not info.key.endswith(f"/{COMMIT_MARKER}"):
            continue
        try:
            doc = json.loads(b"".join(store.read(info.key)))
            if int(doc.get("epoch", -1)) == epoch and "seq" in doc:
                best = max(best, (int(doc["seq"]), str(doc.get("counter", ""))))
        except (NotFound, ValueError, TypeError, AttributeError):
            continue  # gone meanwhile, or not a marker: it proves nothing
    return best


def fence(
    store: Store,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    active: str = "secondary",
    runbook: str = "",
    clock: Clock = _utcnow,
) -> Lease:
    """Take the job's lease on one store for run `run_id`: epoch + 1, `active` the site that
    writes from now on, the old epoch sealed at the commit count read.

    `expect_epoch` is the epoch this run saw when it confirmed the outage: if another run
    already moved past it, this one stops instead of fencing *that* one out. Raises
    `StopFailover` when another run holds or wins the lease (or the lease is another
    runbook's), `ConfigError` for a store that cannot do conditional writes."""

    def make(lease: Lease | None) -> Lease:
        _owned(store, lease, runbook)
        return _next(lease, active=active, holder=holder, run_id=run_id, now=clock(), runbook=runbook)

    return _bump(store, run_id, expect_epoch, make)


def fence_job(
    to_store: Store,
    from_store: Store | None,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    active: str = "secondary",
    runbook: str = "",
    witness: Store | None = None,
    clock: Clock = _utcnow,
    resumes: tuple[int, int, str] | None = None,
) -> tuple[Lease, Lease | None]:
    """Make `active` the active site: fence the store its writers used until now
    (`from_store`) when it answers, then the optional `witness`, then the store of the site
    taking over (`to_store`, must succeed), with one and the same lease.

    The old site's store goes first: that is where its writers' commits race the fence, so
    the seal's count is exact. When it does not answer (the outage) the seal is the highest
    commit of that epoch on `to_store`, and `lifeboat_dr.core.sitestate.catch_up` writes the
    lease there once it answers again. The secondary's store must be written (a failback's
    `from_store`), or with a `witness` a majority of the three: otherwise `SiteStateUnknown`
    and nothing is written on `to_store`. Times are `to_store`'s own clock (one small write).
    `resumes`: (epoch, seq, counter) of the guarded commit of the checkpoint the run resumes
    from: the old epoch is sealed there ("resumed"), so its later commits, landed before the
    fence or not, never count (see `seal_at_resume`).
    A fence over a fence (the site taking over is active already, at `expect_epoch`: a
    failover after `lifeboat fence`) counts that epoch's commits on `to_store`, where its
    writers commit: `to_store` goes first, then `from_store` and the witness as they answer.
    Returns both leases (the second None when `from_store` did not answer)."""
    from lifeboat_dr.core.clocks import store_time

    if active not in SITES:
        raise ConfigError(f"active site must be one of {', '.join(SITES)}, not {active!r}")
    mine = read_lease(to_store)
    if mine is not None and mine[0].run_id == run_id:  # a retried run: finish the other stores' copies only
        if witness is not None:
            _give_lease(witness, mine[0], run_id)
        return mine[0], _give_lease(from_store, mine[0], run_id)
    floor = mine[0] if mine else None
    _owned(to_store, floor, runbook)
    now = store_time(to_store, clock).at
    # A fence over a fence: the site taking over is active already at the newest epoch (by
    # `lifeboat fence`, and a failover follows). That epoch's writers commit to `to_store`,
    # so its count, read by the same conditional write that ends it, seals it exactly.
    over = floor is not None and floor.epoch > 0 and floor.active == active and floor.epoch == expect_epoch
    counting = to_store if over else from_store
    taken: Lease | None = None
    if counting is not None:

        def make(lease: Lease | None) -> Lease:
            _owned(counting, lease, runbook)
            return _next(
                lease,
                active=active,
                holder=holder,
                run_id=run_id,
                now=now,
                floor=floor,
                expect=expect_epoch,
                runbook=runbook,
                resumes=resumes,
            )

        try:
            taken = _bump(counting, run_id, None, make)
        except ProviderUnavailable:
            if over:  # the store that must take the fence does not answer: nothing was fenced
                raise
            taken = None
    on_from = _give_lease(from_store, taken, run_id) if over else taken
    if taken is None and witness is None and active == "primary":
        raise SiteStateUnknown(
            f"{_uri(from_store)} did not answer: a failback must fence the secondary's store too "
            "(a reader trusts it alone); nothing was fenced, retry once it answers"
        )
    if taken is None:  # the old site's store does not answer: seal at what to_store holds
        taken = _next(
            floor,
            active=active,
            holder=holder,
            run_id=run_id,
            now=now,
            exact=False,
            replicated=lambda epoch: highest_commit(to_store, epoch),
            expect=expect_epoch,
            runbook=runbook,
            resumes=resumes,
        )
    given = witness is not None and _give_lease(witness, taken, run_id, strict=True) is not None
    if witness is not None and not given and on_from is None and not over:
        raise SiteStateUnknown(
            f"{_uri(from_store)} and the witness {witness.uri} did not answer: a fence must reach a "
            f"majority of the three stores; nothing was fenced on {to_store.uri}, retry"
        )
    lease = _bump(to_store, run_id, None, lambda cur: _carry(taken, cur))
    return lease, on_from


def _uri(store: Store | None) -> str:
    return store.uri if store is not None else "the other site's store (cannot be opened)"


def _carry(lease: Lease, current: Lease | None) -> Lease:
    """`lease` as written on another store, keeping what this store knows of older epochs."""
    return dataclasses.replace(
        lease, history=merge_history(lease.history, current.history if current else ())
    )


def _give_lease(store: Store | None, lease: Lease, run_id: str, *, strict: bool = False) -> Lease | None:
    """Write `lease` on `store` too; None when it did not answer (with `strict`, a lost race
    still raises `StopFailover`)."""
    if store is None:
        return None
    try:
        return _bump(store, run_id, None, lambda cur: _carry(lease, cur))
    except ProviderUnavailable:
        return None
    except StopFailover:
        if strict:
            raise
        return None


def seal_at_resume(
    stores: Iterable[Store | None], run_id: str, resumes: tuple[int, int, str], *, required: Store
) -> None:
    """Seal epoch `resumes[0]` at the commit the run's job resumes from, on each store whose
    lease is run `run_id`'s (a rollback resumes from an older checkpoint than its fence was
    sealed at; a re-run seals what its first attempt did not): the later commits of that
    epoch are a branch the job never continued. `required` must take it (the store every
    reader trusts: `ProviderUnavailable` otherwise); the others as they answer."""
    epoch, seq, counter = resumes
    for store in (s for s in stores if s is not None):
        try:
            for _ in range(COMMIT_TRIES):
                current = read_lease(store)
                if current is None or current[0].run_id != run_id:
                    break
                lease, version = current
                held = lease.seal(epoch)
                if held is None or held.commits is None or held.commits < seq:
                    break  # nothing to seal there, or it counts fewer already: never more
                if held.basis == "resumed" and held.commits == seq:
                    break
                sealed = dataclasses.replace(held, commits=seq, basis="resumed", counter=counter)
                history = tuple(sealed if s.epoch == epoch else s for s in lease.history)
                try:
                    put_lease(store, dataclasses.replace(lease, history=history), version)
                    break
                except PreconditionFailed:
                    continue  # the resumed job committed meanwhile: read again
        except ProviderUnavailable:
            if store is required:
                raise


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


def marker_body(
    my_epoch: int,
    step: int,
    seq: int,
    active: str,
    clock: Clock = _utcnow,
    committed_at: datetime | None = None,
    counter: str = "",
    record: dict | None = None,
) -> bytes:
    """A guarded-commit marker: epoch, step, commit sequence (on lease counter `counter`) and
    lineage decide; the times are for RPO and people (`committed_at`: the store's clock when
    the commit was counted, `written_at`: the writer's own clock). No decision reads a time.
    `record`: more of the commit record, e.g. the training guard's `{"emergency": {...}}`
    (its keys never replace the ones above)."""
    doc = (record or {}) | {"epoch": my_epoch, "step": step, "seq": seq, "lineage": f"{active}@{my_epoch}"}
    if counter:
        doc["counter"] = counter
    if committed_at is not None:
        doc["committed_at"] = committed_at.isoformat()
    return json.dumps(doc | {"written_at": clock().isoformat()}).encode()


def guarded_commit(
    store: Store,
    marker_key: str,
    my_epoch: int,
    step: int,
    *,
    clock: Clock = _utcnow,
    record: dict | None = None,
) -> int:
    """Commit a checkpoint: count it in the lease while the epoch is `my_epoch` (if-match),
    then write its marker create-only (`record`: more of its commit record, see
    `marker_body`). Returns the commit's sequence number.

    A write whose answer is lost (the connection reset after it landed; the client's retry
    then meets its own write) is read back: the lease naming this marker as its last commit,
    the marker with our bytes. Raises `StopFailover` (no marker written) when the lease moved
    past `my_epoch`, `PreconditionFailed` when another marker is there (a second writer), and
    `ProviderUnavailable` when the store does not answer long enough to tell."""
    try:
        store.head(marker_key)
        raise PreconditionFailed(f"{store.uri}/{marker_key}: already committed")
    except NotFound:
        pass
    counted, info = _count_commit(store, marker_key, my_epoch, clock)
    body = marker_body(
        my_epoch,
        step,
        counted.commits,
        counted.active,
        clock,
        committed_at=info.updated,
        counter=counted.counter,
        record=record,
    )
    try:
        store.put(marker_key, body, if_none_match=True)
    except (PreconditionFailed, ProviderUnavailable):
        if _read_or_none(store, marker_key) != body:  # not ours (or still unknown): as it came
            raise
    return counted.commits


def _count_commit(store: Store, marker_key: str, my_epoch: int, clock: Clock) -> tuple[Lease, ObjectInfo]:
    """Bump the lease's commit count by an if-match write while its epoch is `my_epoch`;
    the lease as counted and the write's answer (or, for a lost answer, the lease's HEAD)."""
    for _ in range(COMMIT_TRIES):
        current = read_lease(store)
        lease, version = current if current else (None, None)
        if (lease.epoch if lease else 0) != my_epoch:
            raise StopFailover(_fenced_out(store, lease, my_epoch))
        base = lease or Lease(0, "", "", clock(), counter=new_counter())
        counted = dataclasses.replace(
            base, commits=base.commits + 1, last_commit=marker_key, counter=base.counter or new_counter()
        )
        try:
            return counted, put_lease(store, counted, version)
        except (PreconditionFailed, ProviderUnavailable) as e:
            landed = _ours(store, counted)
            if landed is not None:
                return counted, landed
            if isinstance(e, ProviderUnavailable):
                raise
            continue  # another commit, or a fence: read again
    raise ProviderUnavailable(f"{store.uri}/{LEASE_KEY}: {COMMIT_TRIES} commits in a row lost the race")


def _ours(store: Store, counted: Lease) -> ObjectInfo | None:
    """The lease's metadata when the store holds exactly `counted` (our write landed)."""
    for _ in range(READ_BACK_TRIES):
        try:
            info = store.head(LEASE_KEY)
            return info if Lease.from_json(b"".join(store.read(LEASE_KEY))) == counted else None
        except (NotFound, ValueError, KeyError, TypeError):
            return None
        except ProviderUnavailable:
            continue  # the store that lost our answer may fail the read back too: ask again
    return None


def _read_or_none(store: Store, key: str) -> bytes | None:
    for _ in range(READ_BACK_TRIES):
        try:
            return b"".join(store.read(key))
        except NotFound:
            return None
        except ProviderUnavailable:
            continue
    return None


def marker_is_fenced_out(marker: bytes, lease: Lease | None) -> bool:
    """Whether certification must ignore a commit marker: not of the active lineage and not
    among the commits its epoch's seal counts (`seq <= seal.commits`): its commit lost to the
    fence, or a writer kept committing where the fence could not reach (a zombie primary).
    No clock is read; a marker without a sequence, or of an epoch without a counted seal,
    proves nothing and is ignored, and so does one counted on another lease than the seal's."""
    if lease is None:
        return False
    doc = json.loads(marker)
    epoch = int(doc.get("epoch", 0))
    if epoch >= lease.epoch:
        return False
    seal = lease.seal(epoch)
    if seal is None or seal.commits is None or "seq" not in doc:
        return True
    if seal.counter and doc.get("counter") != seal.counter:  # counted on another lease object
        return True
    return int(doc["seq"]) > seal.commits
