"""The runbook's failover lock: one acting run at a time, held by a live run with a lease.

The lock is one object, `_lifeboat/lock.json`, in the store of the runbook's secondary site
(a failover must write there, and a failback reads it, so it answers whenever either can
act), changed only by conditional writes, as the site state is (`lifeboat_dr.core.fencing`).
Nobody who only reaches Prefect's API can take, squat or leak it: it is not Prefect's.

- Taking it: create-only when there is none; if-match over a record that was released, or
  whose holder stopped renewing it for a whole lease (reclaimed, and the taker says so:
  `RunbookLock.reclaimed`). Of two racing takers the store lets exactly one win.
- Holding it: the holder renews the record every third of its lease by an if-match write
  (a failed renewal is tried again within seconds, so only a store down for a whole lease
  lets a live holder's lock lapse); a holder that dies (its worker, its host) stops
  renewing, and the lock lapses one lease later. A record lapses one lease (its `lease_s`, capped at `MAX_LEASE_S`) after its last
  write, by the store's own clock: the write's time against the store's time now (read by
  a small write, `lifeboat_dr.core.clocks`). No worker's clock decides, so a taker whose
  clock runs ahead (or stepped) never reclaims a live holder's lock, and a record written by
  hand cannot hold the lock for longer than a lease either; `expires_at` is for people.
- Someone else holds it: `StandDown` at once; the run changes nothing.
- An earlier attempt of this very run holds it (a worker lost mid-failover, the run
  scheduled again under the same id): it waits for that lease to lapse; if the earlier
  attempt renews it meanwhile it is still alive, and this attempt stands down.
- Releasing: an if-match write marking it released, so a holder whose lease lapsed never
  frees the lock a later run took.
- A write whose answer is lost (a reset after it landed) is read back: a record carrying
  this acquisition's token is ours, so a lost reply neither fails the take nor makes the
  holder believe it lost the lock (and stop renewing it).

The lock only stops a second run early; what keeps two runs from both acting is the fence's
epoch (`expect_epoch`), which a run that lost its lock still meets.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta

from lifeboat_dr.kernel.errors import (
    ConfigError,
    LifeboatError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    StandDown,
)
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

LOCK_KEY = "_lifeboat/lock.json"
REPLICATION_LOCK_KEY = "_lifeboat/replication-lock.json"  # one replication pass of a runbook at a time
RECOVERY_LOCK_KEY = "_lifeboat/recovery-lock.json"  # one recovery ladder walk of a runbook at a time
DEFAULT_LEASE_S = 60.0
MAX_LEASE_S = 600.0  # the longest any record may claim, whatever it says
_TRIES = 20  # conditional writes lost to other takers before giving up
_ANSWER_TRIES, _ANSWER_WAIT_S = 3, 2.0  # a store failing requests while the lock is taken
_RENEW_RETRY_S = 2.0  # a failed renewal is tried again this soon

log = logging.getLogger("lifeboat.lock")


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a runbook's lock."""

    runbook: str
    run_id: str
    action: str  # failover, failback, serving, drill
    token: str  # this acquisition's own, so two attempts of one run are told apart
    acquired_at: datetime
    expires_at: datetime
    lease_s: float
    released: bool = False

    def to_json(self) -> bytes:
        doc = asdict(self) | {
            "acquired_at": self.acquired_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Holder:
        doc = json.loads(data)
        return cls(
            runbook=str(doc["runbook"]),
            run_id=str(doc["run_id"]),
            action=str(doc["action"]),
            token=str(doc["token"]),
            acquired_at=datetime.fromisoformat(doc["acquired_at"]),
            expires_at=datetime.fromisoformat(doc["expires_at"]),
            lease_s=float(doc["lease_s"]),
            released=bool(doc.get("released", False)),
        )

    def lapses_at(self, written: ObjectInfo) -> datetime:
        """When this record stops holding the lock, on the store's clock: one lease after it
        was last written (`written.updated`)."""
        return written.updated + timedelta(seconds=min(max(self.lease_s, 0.0), MAX_LEASE_S))

    def describe(self) -> str:
        return f"{self.action} run {self.run_id} (since {self.acquired_at:%Y-%m-%d %H:%M:%S}Z)"


class _Unreadable:
    """A lock record that is not one (hand-edited, truncated): it lapses a lease after its write."""

    def describe(self) -> str:
        return "an unreadable lock record"


class RunbookLock:
    """`with RunbookLock(store, runbook, run_id):` holds the lock for the block (see the
    module docstring); `StandDown` when another live run holds it. After entering,
    `reclaimed` is the lapsed holder this run took it from (None when it was free)."""

    def __init__(
        self,
        store: Store,
        runbook: str,
        run_id: str,
        *,
        action: str = "failover",
        lease_s: float = DEFAULT_LEASE_S,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], None] = time.sleep,
        key: str = LOCK_KEY,
    ):
        if not 0 < lease_s <= MAX_LEASE_S:
            raise ConfigError(f"a lock lease is more than 0 and at most {MAX_LEASE_S:g}s, not {lease_s:g}s")
        self.store, self.runbook, self.run_id, self.action = store, runbook, str(run_id), action
        self.key = key  # the failover lock, or another one-at-a-time lock (REPLICATION_LOCK_KEY, ...)
        self.lease_s, self.clock, self.sleep = lease_s, clock, sleep
        self.token = secrets.token_hex(8)
        self.reclaimed: Holder | _Unreadable | None = None
        self.lost = False  # another run took it after this one failed to renew for a lease
        self._mine: Holder | None = None
        self._version: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> RunbookLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- taking it ------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock (see the module docstring). A store that fails a request is asked
        again a few times (`_ANSWER_TRIES`, `_ANSWER_WAIT_S` apart): a failover must not fail
        to start on one 503."""
        if not self.store.capabilities.conditional_writes:
            raise ConfigError(
                f"{self.store.uri}: this store does not honour conditional writes; it cannot hold "
                f"the failover lock of {self.runbook}"
            )
        for attempt in range(_ANSWER_TRIES):
            try:
                return self._acquire()
            except ProviderUnavailable:
                if attempt == _ANSWER_TRIES - 1:
                    raise
                self.sleep(_ANSWER_WAIT_S)

    def _acquire(self) -> None:
        for _ in range(_TRIES):
            current = self._read()
            try:
                if current is None:
                    self._take(None, None)
                    return
                holder, info = current
                if isinstance(holder, Holder) and holder.released:
                    self._take(info.version, None)
                    return
                if isinstance(holder, Holder) and holder.token == self.token:
                    self._mine, self._version = holder, info.version  # our take landed, its answer lost
                    self._hold()
                    return
                if self._store_now() >= self._lapses_at(holder, info):
                    self._take(info.version, holder)
                    return
                if isinstance(holder, Holder) and holder.run_id == self.run_id:
                    self._outlive(holder, info)
                    continue  # lapsed: take it on the next pass
                raise StandDown(
                    f"another {self._what} of {self.runbook} holds its lock: {holder.describe()}, held "
                    f"until {self._lapses_at(holder, info):%H:%M:%S}Z unless renewed; this run changes nothing"
                )
            except PreconditionFailed:  # another taker wrote first: read again
                continue
        raise ProviderUnavailable(
            f"{self.store.uri}/{self.key}: {_TRIES} tries to take it lost to other runs"
        )

    def _lapses_at(self, holder: Holder | _Unreadable, info: ObjectInfo) -> datetime:
        if isinstance(holder, Holder):
            return holder.lapses_at(info)
        return info.updated + timedelta(seconds=self.lease_s)

    @property
    def _what(self) -> str:
        return {REPLICATION_LOCK_KEY: "replication pass", RECOVERY_LOCK_KEY: "recovery"}.get(
            self.key, "failover"
        )

    def _store_now(self) -> datetime:
        """The store's time now (one small write): what a record's lapse is judged by."""
        from lifeboat_dr.core.clocks import store_time

        return store_time(self.store, self.clock).at

    def _outlive(self, earlier: Holder, info: ObjectInfo) -> None:
        """Wait for an earlier attempt of this run to lose its lease; stand down if it renews."""
        wait = (earlier.lapses_at(info) - self._store_now()).total_seconds()
        self.sleep(max(wait, 0.0) + 0.5)
        again = self._read()
        if again is None or again[1].version == info.version:
            return  # lapsed (or gone): the next pass takes it
        holder = again[0]
        if isinstance(holder, Holder) and holder.token == earlier.token and not holder.released:
            raise StandDown(
                f"an earlier attempt of this run ({self.run_id}) still holds the lock of {self.runbook} "
                "and renews it: this attempt changes nothing"
            )

    def _take(self, version: str | None, lapsed: Holder | _Unreadable | None) -> None:
        now = self.clock()
        mine = Holder(
            self.runbook,
            self.run_id,
            self.action,
            self.token,
            now,
            now + timedelta(seconds=self.lease_s),
            self.lease_s,
        )
        self._write(mine, version)
        self.reclaimed = lapsed
        if lapsed is not None:
            log.warning("reclaimed the lock of %s from %s: its lease lapsed", self.runbook, lapsed.describe())
        self._hold()

    def _hold(self) -> None:
        self._renewer = threading.Thread(target=self._renew, daemon=True, name=f"lock-{self.runbook}")
        self._renewer.start()

    # -- holding and giving it up -----------------------------------------------------------
    def _renew(self) -> None:
        wait = self.lease_s / 3
        while not self._stop.wait(wait):
            now = self.clock()
            try:
                self._write(
                    replace(self._mine, expires_at=now + timedelta(seconds=self.lease_s)), self._version
                )
                wait = self.lease_s / 3
            except PreconditionFailed:
                self.lost = True
                log.warning("lost the lock of %s: another run took it after a lapsed lease", self.runbook)
                return
            except (LifeboatError, OSError) as e:
                # soon again, not a third of a lease later: only a store down for a whole lease
                # lets a live holder's lock lapse (retention and other runs trust it)
                wait = min(self.lease_s / 3, _RENEW_RETRY_S)
                log.warning("could not renew the lock of %s: %s", self.runbook, e)

    def release(self) -> None:
        """Mark the lock released (if it is still ours); a store that does not answer lets it lapse."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=30)
        if self._mine is None or self.lost:
            return
        try:
            self._write(replace(self._mine, released=True, expires_at=self.clock()), self._version)
        except PreconditionFailed:
            self.lost = True  # taken over after a lapse: it is theirs now
        except (LifeboatError, OSError) as e:
            log.warning(
                "could not release the lock of %s (it lapses in %gs): %s", self.runbook, self.lease_s, e
            )
        finally:
            self._mine = None

    # -- the record -------------------------------------------------------------------------
    def _write(self, holder: Holder, version: str | None) -> None:
        for _ in range(2):
            condition = {"if_match": version} if version is not None else {"if_none_match": True}
            try:
                info = self.store.put(self.key, holder.to_json(), **condition)
            except ProviderUnavailable:
                info = self._reread(lambda found: found == holder)  # a lost reply: did it land?
                if info is None:
                    raise
            except PreconditionFailed:
                # our own earlier write landed though its answer was lost: write again over it
                mine = self._reread(lambda found: found.token == self.token and not found.released)
                if mine is None:
                    raise
                version = mine.version
                continue
            self._mine, self._version = holder, info.version
            return
        raise PreconditionFailed(f"{self.store.uri}/{self.key}: changed twice while writing it")

    def _reread(self, ours: Callable[[Holder], bool]) -> ObjectInfo | None:
        """The record's metadata when it reads back as `ours` (None: not, or unreadable)."""
        try:
            current = self._read()
        except LifeboatError:
            return None
        if current is None or not isinstance(current[0], Holder) or not ours(current[0]):
            return None
        return current[1]

    def _read(self) -> tuple[Holder | _Unreadable, ObjectInfo] | None:
        """The record and the version it was read at (re-headed: a record rewritten while
        we read it is read again), or None when there is none."""
        for _ in range(10):
            try:
                info = self.store.head(self.key)
                data = b"".join(self.store.read(self.key))
                if self.store.head(self.key).version != info.version:
                    continue
            except NotFound:
                return None
            try:
                return Holder.from_json(data), info
            except (ValueError, KeyError, TypeError):
                return _Unreadable(), info
        raise ProviderUnavailable(f"{self.store.uri}/{self.key} keeps changing while we read it")


def read_holder(store: Store) -> Holder | None:
    """The lock's current record (None when there is none, or it cannot be read)."""
    try:
        return Holder.from_json(b"".join(store.read(LOCK_KEY)))
    except NotFound:
        return None
    except (ValueError, KeyError, TypeError):
        return None


def holder_now(
    store: Store, runbook: str, clock: Callable[[], datetime] = _utcnow, key: str = LOCK_KEY
) -> Holder | _Unreadable | None:
    """Who holds `runbook`'s lock now: its record, unless released or lapsed by the store's
    clock (None: nobody). For a reader that must not act while a failover does (retention)."""
    reader = RunbookLock(store, runbook, "reader", clock=clock, key=key)
    current = reader._read()
    if current is None:
        return None
    holder, info = current
    if isinstance(holder, Holder) and holder.released:
        return None
    return None if reader._store_now() >= reader._lapses_at(holder, info) else holder


@contextmanager
def one_replication_pass(
    store: Store | None,
    runbook: str,
    run_id: str,
    *,
    dry_run: bool = False,
    clock: Callable[[], datetime] = _utcnow,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[RunbookLock | None]:
    """Hold `runbook`'s replication lock (`REPLICATION_LOCK_KEY` in `store`, the secondary's)
    for one pass: two passes at once (a scheduled one outlasting its interval, a `lifeboat
    replicate` by hand) plan against each other's half-done copies, and one's retention can
    delete what the other just unmarked. Another live pass: `StandDown`. A dry run, or a store
    that cannot hold a lock (no conditional writes), takes none."""
    if dry_run or store is None or not store.capabilities.conditional_writes:
        yield None
        return
    lock = RunbookLock(
        store, runbook, run_id, action="replicate", key=REPLICATION_LOCK_KEY, clock=clock, sleep=sleep
    )
    with lock:
        yield lock
