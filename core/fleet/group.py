"""Grouping the confirmed outages of one region into one fleet run (docs/fleet.md).

Three kinds of object, in one store every runbook of the region names alike (`fleet.lock_store`);
`<region>` is the failed primary's `<cloud>-<region>` (`aws-us-east-1`):

- `_lifeboat/fleet/<region>/joined/<runbook>`: a join marker, written create-only by each
  grouping failover (`{"runbook", "run_id", "confirmed_at"}`); its time is the store's (`updated`).
- `_lifeboat/fleet/<region>.json`: the region's `RunbookLock` (lease, renewal, reclaim: `core/lock.py`).
- `_lifeboat/fleet/<region>/group.json`: the group (`Group`): the fleet run's idempotency key,
  the window it lists, and once started the fleet run's id and members.

The protocol, for one grouping failover (`group_outage`):

1. Join: create the marker. Already there and younger than the window: a duplicate alert (kept,
   logged). Older: a marker of an earlier outage, rewritten (if-match) so it dates this one.
2. Take the region's lock; another live holder: `StandDown` naming it (this run's marker is in
   the window it lists).
3. Holding it, read the group. One whose fleet run is under way (`run_ended` says no): `StandDown`
   naming that run. One with no fleet run yet (its taker died, or failed to start it): reused,
   key and window, so the run it may have started is the one Prefect returns. Otherwise a new
   group: key `fleet-<region>-<the lock's acquisition token>`, its window opening now.
4. Wait until the window closes (store time), list the markers written since one window before
   it opened (so also those that joined while the lock was held: each stood down on it), skip any that is malformed, names a runbook not deployed in
   this region, or disagrees with its own key (each logged), and start one fleet run for them
   with the key (`start_fleet`); write its id into the group; release the lock.

Partial failures. A store that fails or does not answer (503, a hang past its deadline) on
the marker, the lock or the group is unknown, never "no group" or "no lock": the
`ProviderUnavailable` goes to the caller, which starts no fleet run (the lock, if taken, is
released or lapses). A create-only write whose reply was lost after it landed is recognised
on the retry's refusal by reading it back (the marker's `run_id`, the group record itself).
Every time that decides (marker age, window, lease) is the store's (`store_time`), so
callers whose clocks disagree by minutes measure one window.

An unfinished group (its taker died) is reused, key and window, only while it is fresh: its
window closed less than one window plus one lease ago (a live taker would have recorded its
run by then). An older one is abandoned, logged, and a new group opened with a new key and
window, so a later, unrelated outage is not listed into a long-dead window. And if the
reused key returns a fleet run that has already ended (the dead taker had started it),
that run is not joined: a new group is opened. The cost, stated: a taker that died after
starting its fleet run and is found stale leaves that run and the new one both planning;
each member's failover still fences and proves its own quorum, so neither can act twice.

Marker lifetime (the design's open point), answered minimally: a marker lives one window. A
group lives until its fleet run ends, asked of the orchestrator (`run_ended`), never by a
record's say-so; so a duplicate alert while the fleet run is under way stands down naming it,
and the first confirmation after it ended opens a new group: a later outage of the region
groups afresh (and so does an alert repeated after the fleet run ended: its members' own
failovers then find their site state already failed over).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.clocks import store_time
from lifeboat_dr.core.lock import DEFAULT_LEASE_S, RunbookLock
from lifeboat_dr.kernel.errors import NotFound, PreconditionFailed, StandDown
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

log = logging.getLogger("lifeboat.fleet.group")

ROOT = "_lifeboat/fleet"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def region_of(infra: str) -> str:
    """`aws/us-east-1` -> `aws-us-east-1`: the failed region's name in keys."""
    return "-".join(p for p in infra.strip("/").lower().split("/") if p) or "local"


def lock_key(region: str) -> str:
    return f"{ROOT}/{region}.json"


def marker_prefix(region: str) -> str:
    return f"{ROOT}/{region}/joined/"


def group_key(region: str) -> str:
    return f"{ROOT}/{region}/group.json"


@dataclass(frozen=True)
class Group:
    """One region's group: what the fleet run is created with, and once created, which it is."""

    key: str  # the fleet run's idempotency key: a taker's lock token, reused by a reclaimer
    opened_at: datetime  # the window's opening, store time
    window_s: float  # its length
    fleet_run_id: str | None = None  # None until the fleet run is created
    runbooks: tuple[str, ...] = ()  # the members it was started for

    @property
    def closes_at(self) -> datetime:
        return self.opened_at + timedelta(seconds=self.window_s)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self) | {"opened_at": self.opened_at.isoformat()}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Group:
        doc = json.loads(data)
        return cls(
            key=str(doc["key"]),
            opened_at=datetime.fromisoformat(doc["opened_at"]),
            window_s=float(doc["window_s"]),
            fleet_run_id=None if doc.get("fleet_run_id") is None else str(doc["fleet_run_id"]),
            runbooks=tuple(str(r) for r in doc.get("runbooks") or ()),
        )


class FleetUnderWay(StandDown):
    """A fleet run of the region is under way: `fleet_run_id`; `member`: this runbook is in it
    (a duplicate), else it was confirmed after that run started (late: it waits for its end)."""

    def __init__(self, message: str, fleet_run_id: str = "", member: bool = True):
        super().__init__(message)
        self.fleet_run_id, self.member = fleet_run_id, member


@dataclass(frozen=True)
class Grouped:
    """What the taker did: the fleet run it started (or Prefect returned for the key)."""

    fleet_run_id: str
    runbooks: tuple[str, ...]
    key: str
    reused: bool  # the group of a taker that did not finish (reclaimed): same key, same run

    def describe(self) -> str:
        return f"grouped into fleet run {self.fleet_run_id} ({', '.join(self.runbooks)})"


def join(
    store: Store,
    region: str,
    runbook: str,
    run_id: str,
    window_s: float,
    clock: Callable[[], datetime] = _utcnow,
) -> bool:
    """Write `runbook`'s join marker (its body's `confirmed_at` is for people; the store's write
    time is what counts). False when a marker younger than the window was already there: a duplicate."""
    now = clock()
    key = marker_prefix(region) + runbook
    body = json.dumps({"runbook": runbook, "run_id": run_id, "confirmed_at": now.isoformat()}).encode()
    try:
        store.put(key, body, if_none_match=True)
        return True
    except PreconditionFailed:
        pass
    try:
        there = store.head(key)
    except NotFound:  # deleted meanwhile: write it again
        store.put(key, body, if_none_match=True)
        return True
    if (store_time(store, clock).at - there.updated).total_seconds() < window_s:
        if _said(store, key).get("run_id") == run_id:  # our own write, its reply lost: a retry met it
            return True
        log.info("%s: a duplicate: its join marker for %s is already there", runbook, region)
        return False
    try:  # an earlier outage's marker: date it to this one
        store.put(key, body, if_match=there.version)
    except PreconditionFailed:  # another attempt rewrote it just now: that one dates it
        return False
    return True


def group_outage(
    store: Store,
    *,
    region: str,
    runbook: str,
    run_id: str,
    members: Collection[str],
    window_s: float,
    start_fleet: Callable[[list[str], str], str],
    run_ended: Callable[[str], bool],
    lease_s: float = DEFAULT_LEASE_S,
    clock: Callable[[], datetime] = _utcnow,
    sleep: Callable[[float], None] = time.sleep,
) -> Grouped:
    """Group `runbook`'s confirmed outage of `region` with the others in its window (see the
    module docstring). `members`: the runbooks deployed in this region that may group (a marker
    naming another is ignored). `start_fleet(runbooks, key)` creates the fleet run with the
    idempotency key and returns its id; `run_ended(id)` says whether that run has ended.
    `StandDown` when another run groups, or a fleet run of this region is under way."""
    join(store, region, runbook, run_id, window_s, clock)
    lock = RunbookLock(
        store,
        f"region {region}",
        run_id,
        action="fleet-group",
        key=lock_key(region),
        lease_s=lease_s,
        clock=clock,
        sleep=sleep,
    )
    try:
        lock.acquire()
    except StandDown as e:
        raise StandDown(f"{runbook} joined the group of {region}, which another run forms: {e}") from None
    try:
        group, version = _read_group(store, region)
        if group is not None and group.fleet_run_id is not None and not run_ended(group.fleet_run_id):
            member = runbook in group.runbooks
            raise FleetUnderWay(
                f"fleet run {group.fleet_run_id} of {region} is under way ({', '.join(group.runbooks)}); "
                f"{runbook} {'is in it' if member else 'was confirmed after it started: it waits for it to end'}",
                group.fleet_run_id,
                member,
            )
        reused = group is not None and group.fleet_run_id is None
        now = store_time(store, clock).at
        if reused and now > group.closes_at + timedelta(seconds=group.window_s + lease_s):
            log.warning(
                "%s: abandoned the unfinished group %s (its window closed %s ago): a new group",
                region,
                group.key,
                now - group.closes_at,
            )
            reused = False
        if reused:
            log.warning(
                "%s: goes on with the group of a run that did not finish it (key %s)", region, group.key
            )
        else:
            group = _opened(region, lock, now, window_s)
            version = _write_group(store, region, group, version)
        wait = (group.closes_at - store_time(store, clock).at).total_seconds()
        if wait > 0:
            sleep(wait)
        runbooks = listed(store, region, group, members, taker=runbook)
        fleet_run_id = start_fleet(runbooks, group.key)
        if reused and run_ended(fleet_run_id):  # the dead taker had started it, and it is over
            log.warning(
                "%s: the unfinished group's fleet run %s has ended: a new group", region, fleet_run_id
            )
            group = _opened(region, lock, store_time(store, clock).at, window_s)
            version, reused = _write_group(store, region, group, version), False
            sleep(window_s)
            runbooks = listed(store, region, group, members, taker=runbook)
            fleet_run_id = start_fleet(runbooks, group.key)
        try:
            _write_group(
                store, region, replace(group, fleet_run_id=fleet_run_id, runbooks=tuple(runbooks)), version
            )
        except PreconditionFailed:  # rewritten under us (our lease lapsed): the key made it the same run
            log.warning("%s: the group record changed while %s formed it", region, run_id)
        return Grouped(fleet_run_id, tuple(runbooks), group.key, reused)
    finally:
        lock.release()


def _opened(region: str, lock: RunbookLock, now: datetime, window_s: float) -> Group:
    """A new group, its window opening `now`; its key (`fleet-<region>-<lock token>`) is the
    taker's own, so a reclaimer of the lock opens another."""
    return Group(f"fleet-{region}-{lock.token}", now, window_s)


def listed(
    store: Store, region: str, group: Group, members: Collection[str], taker: str | None = None
) -> list[str]:
    """The runbooks whose markers were written since one window before `group` opened (store
    time), sorted: those of its window, and any that joined while its taker held the lock
    (each of those stood down on it, so none is left out); malformed, undeployed and
    mislabelled markers are skipped, each logged. The `taker` is listed whatever its marker's
    age: it has just joined, and a marker it found young (a duplicate's, kept) may have aged
    past that bound by the time the group opened."""
    since = group.opened_at - timedelta(seconds=group.window_s)
    found = [taker] if taker is not None and taker in members else []
    prefix = marker_prefix(region)
    for info in store.list(prefix):
        name = info.key[len(prefix) :] if info.key.startswith(prefix) else info.key.rsplit("/", 1)[-1]
        if info.updated < since or name == taker:
            continue
        why = _refused(store, info, name, members)
        if why:
            log.warning("ignored the join marker %s: %s", info.key, why)
            continue
        found.append(name)
    return sorted(found)


def _refused(store: Store, info: ObjectInfo, name: str, members: Collection[str]) -> str | None:
    try:
        doc = json.loads(b"".join(store.read(info.key)))
        said = doc["runbook"]
        datetime.fromisoformat(doc["confirmed_at"])
    except NotFound:
        return "gone while listed"
    except (ValueError, KeyError, TypeError) as e:
        return f"not a join marker ({type(e).__name__}: {str(e)[:80]})"
    if said != name:
        return f"names runbook {str(said)[:64]!r} under the key of {name!r}"
    if name not in members:
        return f"{name!r} is no runbook deployed in this region"
    return None


def _said(store: Store, key: str) -> dict:
    try:
        doc = json.loads(b"".join(store.read(key)))
    except (NotFound, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _read_group(store: Store, region: str) -> tuple[Group | None, str | None]:
    """The group and its version (None, None: none; None, version: unreadable, logged)."""
    try:
        info = store.head(group_key(region))
        data = b"".join(store.read(group_key(region)))
    except NotFound:
        return None, None
    try:
        return Group.from_json(data), info.version
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s: ignored an unreadable group record (%s): a new group replaces it", region, e)
        return None, info.version


def _write_group(store: Store, region: str, group: Group, version: str | None) -> str:
    """Write `group` conditionally; a refusal whose record is this very one (a retry of a write
    whose reply was lost after it landed) is ours, and its version is returned."""
    condition = {"if_match": version} if version is not None else {"if_none_match": True}
    try:
        return store.put(group_key(region), group.to_json(), **condition).version
    except PreconditionFailed:
        there, there_version = _read_group(store, region)
        if there == group and there_version is not None:
            return there_version
        raise
