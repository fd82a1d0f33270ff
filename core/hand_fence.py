"""The old primary fenced by hand (`lifeboat fence`): with Prefect down, straight against the
stores, through the failover's own fence (`lifeboat_dr.core.fencing.fence_job`).

- The site state is read first (`lifeboat_dr.core.sitestate.read_site_state`, one GET per
  store): a view that is not conclusive (the secondary's store, or with a witness a majority
  of the three, did not answer) is `SiteStateUnknown` before anything is written, the lock
  included; a lease naming another runbook is `StopFailover`.
- The secondary active already (this fence, or a failover's, landed): nothing is raised.
  A store that missed that fence and answers now (the old primary's, back from its outage)
  gets the lease (`catch_up`), which fences out the writers that commit there.
- Else, holding the runbook's lock (`lifeboat_dr.core.lock.RunbookLock`, action `fence`;
  a failover running now holds it, and this stands down), the site state is read again and
  `fence_job` makes the secondary active at the next epoch: the primary's store first when it
  answered the read (its writers' commits race the fence there, so the seal is exact), else
  the old epoch is sealed at the highest commit of it the secondary holds, so whatever a
  zombie commits behind the partition never counts.

One fence raises one epoch: the secondary active is the fence's own end state, so a second
run (or one racing it) finds it done. The fence is one ledger entry of kind `manual fence`
with who and why. A failover started afterwards takes its own epoch on top (its job must
not share an epoch with one resumed by hand under this one).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from lifeboat_dr.core.fencing import Lease, Seal, fence_job, peek_lease
from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.lock import DEFAULT_LEASE_S, RunbookLock
from lifeboat_dr.core.sitestate import SiteState, catch_up, read_site_state, site_stores
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError
from lifeboat_dr.providers.storage.base import Store

KIND = "manual fence"  # the ledger entry's kind
TAKES_OVER = "secondary"


@dataclass(frozen=True)
class HandFence:
    """What `fence_by_hand` did (or found done)."""

    runbook: str
    by: str
    reason: str
    fenced: bool  # this run raised the epoch (False: the secondary was active already)
    epoch_before: int
    lease: Lease  # the lease now (this run's, or the one found)
    seal: Seal | None  # how the primary's last epoch ended
    written: tuple[str, ...] = ()  # stores this run wrote the lease to (a catch-up's included)
    not_reached: tuple[str, ...] = ()  # stores that did not answer: they get it when they do
    caught_up: tuple[str, ...] = ()  # stores that had missed the fence and have it now

    @property
    def run_id(self) -> str:
        return self.lease.run_id if self.fenced else ""

    def to_dict(self) -> dict:
        return {
            "runbook": self.runbook,
            "fenced": self.fenced,
            "run_id": self.run_id,
            "by": self.by,
            "reason": self.reason,
            "epoch_before": self.epoch_before,
            "epoch": self.lease.epoch,
            "active": self.lease.active,
            "holder": self.lease.holder,
            "lease_run_id": self.lease.run_id,
            "seal": self.seal.to_dict() if self.seal else None,
            "written": list(self.written),
            "not_reached": list(self.not_reached),
            "caught_up": list(self.caught_up),
            "resume_epoch": self.lease.epoch,
        }

    def lines(self) -> list[str]:
        lease = self.lease
        if self.fenced:
            out = [
                f"fenced {self.runbook}: epoch {self.epoch_before} -> {lease.epoch}, {lease.active} active "
                f"(run {lease.run_id}, by {self.by}: {self.reason})"
            ]
        else:
            out = [
                f"{self.runbook}: already fenced at epoch {lease.epoch} ({lease.active} active since run "
                f"{lease.run_id or '?'} by {lease.holder or '?'}, {lease.acquired_at:%Y-%m-%d %H:%M:%S}Z): "
                "nothing raised"
            ]
        if self.seal is not None:
            out.append(
                f"sealed epoch {self.seal.epoch} ({self.seal.active}@{self.seal.epoch}) {_counted(self.seal)}"
            )
        out += [
            f"lease written: {uri}/_lifeboat/lease.json" for uri in self.written if uri not in self.caught_up
        ]
        out += [
            f"caught up: {uri} had missed the fence; its writers stop at their next commit"
            for uri in self.caught_up
        ]
        out += [
            f"not reached: {uri} (did not answer; `lifeboat fence` again, or `lifeboat replicate`, writes it "
            "there once it answers; meanwhile its later commits never count)"
            for uri in self.not_reached
        ]
        out.append(f"a job resumed on the {lease.active} commits under LIFEBOAT_EPOCH={lease.epoch}")
        return out


def _counted(seal: Seal) -> str:
    if seal.commits is None:
        return "before commits were counted: none of its commits is provable"
    if seal.basis == "replicated":
        return (
            f"at commit {seal.commits}: its store did not answer, so the newest of its commits the "
            "secondary holds; later ones never count"
        )
    if seal.basis == "resumed":
        return f"at commit {seal.commits}: the commit the next lineage resumed from"
    return f"at commit {seal.commits}: counted on its writers' own store"


def fence_by_hand(
    primary: Store | None,
    secondary: Store,
    witness: Store | None = None,
    *,
    runbook: str,
    by: str,
    reason: str,
    ledger: RtoLedger | None = None,
    run_id: str | None = None,
    lock_lease_s: float = DEFAULT_LEASE_S,
) -> HandFence:
    """Fence the primary site's writers of `runbook` and make the secondary active (see the
    module docstring). `primary` None: it cannot even be opened. `ledger` records a fence
    that raised the epoch. Raises `SiteStateUnknown` (retry), `StandDown` (a failover holds
    the lock: retry once it is done), `StopFailover` (another runbook's lease, or a race lost)."""
    by, reason = by.strip(), reason.strip()
    if not by or "\n" in by:
        raise ConfigError("--by NAME: who fences, on one line")
    if not reason:
        raise ConfigError("--reason TEXT: why the primary is fenced (it goes into the ledger)")
    stores = site_stores(primary, secondary, witness)
    state = read_site_state(stores, runbook=runbook)
    if state.active == TAKES_OVER:
        return _found(state, stores, runbook, by, reason)
    run_id = run_id or f"manual-fence-{uuid.uuid4().hex[:12]}"
    with RunbookLock(secondary, runbook, run_id, action="fence", lease_s=lock_lease_s):
        # Again (a failover may have ended meanwhile), from the stores that answered: one that
        # did not costs a whole deadline per read
        answered = {r: (st if r in state.answered else None) for r, st in stores.items()}
        state = read_site_state(answered, runbook=runbook)
        if state.active == TAKES_OVER:
            return _found(state, stores, runbook, by, reason)
        if ledger is not None:
            with ledger.batch():  # in progress before anything is written: who, why, since when
                ledger.note("by", by)
                ledger.note("reason", reason)
                ledger.begin("fenced")
        reachable = primary if "primary" in state.answered else None  # it just failed to answer: not again
        try:
            lease, on_primary = fence_job(
                secondary,
                reachable,
                run_id=run_id,
                holder=f"manual:{by}",
                expect_epoch=state.epoch,
                active=TAKES_OVER,
                runbook=runbook,
                witness=witness,
            )
        except LifeboatError as e:
            if ledger is not None:
                ledger.fail("fenced", e)
            raise
        written = [secondary.uri] + ([primary.uri] if on_primary is not None else [])
        missed = [] if on_primary is not None else [_uri(primary, "primary")]
        if witness is not None:
            landed = "witness" in state.answered and _holds(witness, run_id)  # silent before: not asked again
            (written if landed else missed).append(witness.uri)
        done = HandFence(
            runbook,
            by,
            reason,
            True,
            state.epoch,
            lease,
            lease.seal(state.epoch),
            tuple(written),
            tuple(missed),
        )
        if ledger is not None:
            ledger.mark("fenced")
            ledger.note("fence", "; ".join(done.lines()[1:]))
            ledger.finish("completed")
        return done


def _found(
    state: SiteState, stores: Mapping[str, Store | None], runbook: str, by: str, reason: str
) -> HandFence:
    """The secondary is active already: catch up the stores that missed its fence."""
    lease = state.lease
    caught = tuple(catch_up(state, stores))
    missed = [r for r in ("primary", "witness") if r in stores and r not in state.answered]
    seal = next((s for s in reversed(lease.history) if s.active == "primary"), None)
    return HandFence(
        runbook,
        by,
        reason,
        False,
        lease.epoch,
        lease,
        seal,
        caught,
        tuple(_uri(stores[r], r) for r in missed),
        caught,
    )


def _holds(store: Store, run_id: str) -> bool:
    try:
        lease = peek_lease(store)
    except LifeboatError:
        return False
    return lease is not None and lease.run_id == run_id


def _uri(store: Store | None, role: str) -> str:
    return store.uri if store is not None else f"the {role}'s store (cannot be opened)"
