"""Fencing: a lease with an epoch per protected job, bumped by conditional writes.

Leader election is not fencing; storage is. Each protected job's store holds
`_lifeboat/lease.json` = `{"epoch", "holder", "run_id", "acquired_at"}`. A failover bumps
the epoch with a conditional write (create-only when there is no lease yet, if-match on
the version it read otherwise), so of any number of racing failovers that saw the same
epoch exactly one wins; the others get `StopFailover`. Re-running the same failover run
(same `run_id`) after a crash finds its own lease and does not bump twice.

Writers (the training job) hold the epoch they started under and check it before they
commit a checkpoint (`check_lease`, `guarded_commit`). Object stores cannot make one
object's write conditional on another's, so a commit is checked before *and* after the
create-only marker write; a marker that lost the race is removed and the writer told to
stop. `marker_is_fenced_out` tells a reader of such markers to ignore a stale-epoch one that
a crashed writer left behind (certification does not read guarded-commit markers yet).

In a training loop (the epoch comes from the launcher, e.g. `LIFEBOAT_EPOCH`):

    my_epoch = int(os.environ.get("LIFEBOAT_EPOCH", "0"))
    ...write the shards of step N...
    guarded_commit(store, f"ckpt/step-{N}/COMMIT", my_epoch, N)   # StopFailover: exit now

Backends that do not honour preconditions (the GCS emulator ignores `ifGenerationMatch`)
state it in `Capabilities.conditional_writes`; `fence` refuses them rather than pretend.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from lifeboat.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable, StopFailover
from providers.storage.base import Store

LEASE_KEY = "_lifeboat/lease.json"

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Lease:
    """Who may write a job's checkpoints: the holder of the highest epoch."""

    epoch: int  # 0 = the original primary, never fenced; each failover adds one
    holder: str  # e.g. "primary:aws/us-east-1" or "secondary:gcp/us-central1"
    run_id: str  # the failover run that took it ("" for the primary's initial lease)
    acquired_at: datetime

    def to_json(self) -> bytes:
        doc = asdict(self) | {"acquired_at": self.acquired_at.isoformat()}
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Lease:
        doc = json.loads(data)
        return cls(
            epoch=int(doc["epoch"]),
            holder=str(doc["holder"]),
            run_id=str(doc.get("run_id", "")),
            acquired_at=datetime.fromisoformat(doc["acquired_at"]),
        )


def read_lease(store: Store) -> tuple[Lease, str] | None:
    """The current lease and its version token, or None when the job was never fenced."""
    # The version we if-match on must be the one we read: re-head after reading and retry
    # on a concurrent rewrite instead of pairing new bytes with an old token.
    for _ in range(10):
        try:
            info = store.head(LEASE_KEY)
            data = b"".join(store.read(LEASE_KEY))
            if store.head(LEASE_KEY).version == info.version:
                return Lease.from_json(data), info.version
        except NotFound:
            return None
    raise ProviderUnavailable(f"{store.uri}/{LEASE_KEY} keeps changing while we read it")


def fence(
    store: Store,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    clock: Clock = _utcnow,
) -> Lease:
    """Take the job's lease for failover run `run_id`: epoch + 1, by a conditional write.

    `expect_epoch` is the epoch this failover saw when it confirmed the outage: if another
    failover already moved past it, this one stops instead of fencing *that* one out.
    Idempotent: the same `run_id` gets its existing lease back, never a second bump.
    Raises `StopFailover` when another run holds or wins the lease, `ConfigError` for a
    store that cannot do conditional writes."""
    if not store.capabilities.conditional_writes:
        raise ConfigError(
            f"{store.uri}: this store does not honour conditional writes; it cannot fence a job"
        )
    current = read_lease(store)
    if current is not None:
        lease, version = current
        if lease.run_id == run_id:
            return lease
        if expect_epoch is not None and lease.epoch != expect_epoch:
            raise StopFailover(
                f"{store.uri}: the lease is at epoch {lease.epoch} (held by {lease.holder}, run "
                f"{lease.run_id}), not {expect_epoch}: another failover already fenced this job"
            )
        new = Lease(lease.epoch + 1, holder, run_id, clock())
        condition = {"if_match": version}
    else:
        if expect_epoch not in (None, 0):
            raise StopFailover(f"{store.uri}: no lease found, expected epoch {expect_epoch}")
        new = Lease(1, holder, run_id, clock())
        condition = {"if_none_match": True}
    try:
        store.put(LEASE_KEY, new.to_json(), **condition)
    except PreconditionFailed:
        winner = read_lease(store)
        if winner is not None and winner[0].run_id == run_id:  # our own earlier try landed
            return winner[0]
        who = f"{winner[0].holder} (run {winner[0].run_id}, epoch {winner[0].epoch})" if winner else "?"
        raise StopFailover(f"{store.uri}: lost the fencing race to {who}") from None
    return new


def fence_job(
    secondary: Store,
    primary: Store | None,
    *,
    run_id: str,
    holder: str,
    expect_epoch: int | None = None,
    clock: Clock = _utcnow,
) -> tuple[Lease, Lease | None]:
    """Fence the secondary store (must succeed), then the primary's when it answers.

    Returns both leases; the primary's is None when its store is unreachable (the outage
    itself), which is expected: the secondary's lease is the one certification trusts."""
    lease = fence(secondary, run_id=run_id, holder=holder, expect_epoch=expect_epoch, clock=clock)
    if primary is None:
        return lease, None
    try:
        return lease, fence(primary, run_id=run_id, holder=holder, clock=clock)
    except ProviderUnavailable:
        return lease, None


def check_lease(store: Store, my_epoch: int) -> Lease | None:
    """For training jobs: raise `StopFailover` if a failover fenced us out (the lease moved
    past `my_epoch`). Returns the current lease (None when never fenced and `my_epoch` is 0)."""
    current = read_lease(store)
    epoch = current[0].epoch if current else 0
    if epoch != my_epoch:
        who = f" by {current[0].holder} (run {current[0].run_id})" if current else ""
        raise StopFailover(
            f"{store.uri}: fenced out{who}: lease epoch is {epoch}, this writer holds {my_epoch}; "
            "stop writing checkpoints"
        )
    return current[0] if current else None


def marker_body(my_epoch: int, step: int, clock: Clock = _utcnow) -> bytes:
    return json.dumps({"epoch": my_epoch, "step": step, "written_at": clock().isoformat()}).encode()


def guarded_commit(
    store: Store, marker_key: str, my_epoch: int, step: int, *, clock: Clock = _utcnow
) -> None:
    """Commit a checkpoint: write its marker create-only, refusing a stale-epoch writer.

    Checks the lease before the write and again after it; a marker written by a writer that
    got fenced in between is deleted again and the writer gets `StopFailover`. A marker that
    already exists (a retry, or a second writer) raises `PreconditionFailed`."""
    check_lease(store, my_epoch)
    store.put(marker_key, marker_body(my_epoch, step, clock), if_none_match=True)
    try:
        check_lease(store, my_epoch)
    except StopFailover:
        store.delete(marker_key)
        raise


def marker_is_fenced_out(marker: bytes, lease: Lease | None) -> bool:
    """Whether certification must ignore a commit marker: written under an older epoch
    after the lease moved on (a fenced-out writer that crashed before cleaning up)."""
    if lease is None:
        return False
    doc = json.loads(marker)
    epoch = int(doc.get("epoch", 0))
    written = datetime.fromisoformat(doc["written_at"]) if "written_at" in doc else None
    return epoch < lease.epoch and (written is None or written >= lease.acquired_at)
