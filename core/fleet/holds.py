"""What fleet runs hold of the secondary's capacity, where every worker of the region reads it.

A fleet run's plan is only safe if it knows what earlier fleet runs of the outage gave out,
whichever worker ran them. So each run keeps its holds in the store its region's outages
group in (`fleet.lock_store`, `core/fleet/group.py`), one object per fleet run:
`_lifeboat/fleet/<region>/holds/<fleet run id>.json`, the run's `FleetEntry` for that
region's runbooks. It is written before any member acts, every placed job `planned` (it may
be running from then on), and rewritten with the outcomes when the run ends; a run that
died between the two leaves its jobs `planned`, which hold.

Reading them, planning and writing the run's own holds happen under one short lock per region
(`_lifeboat/fleet/<region>/planning.json`), so two fleet runs planning at once on two workers
cannot both give out the same GPUs. A record's time is the store's (its write time), not the
writer's clock.

Unknown is never "nothing held": a store that fails or does not answer (`ProviderUnavailable`),
a record that cannot be read, or a planning lock that stays taken (`HoldsUnknown`, naming it)
fails the run before it plans.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from lifeboat_dr.core.fleet.group import ROOT
from lifeboat_dr.core.fleet.record import FleetEntry
from lifeboat_dr.core.lock import DEFAULT_LEASE_S, RunbookLock
from lifeboat_dr.kernel.errors import LifeboatError, NotFound, StandDown
from lifeboat_dr.providers.storage.base import Store

PLANNING_POLL_S = 0.5  # how often a run asks again for a region's planning lock another run holds


class HoldsUnknown(LifeboatError):
    """What earlier fleet runs of the region hold could not be read: nothing is planned."""


def holds_prefix(region: str) -> str:
    return f"{ROOT}/{region}/holds/"


def planning_lock_key(region: str) -> str:
    return f"{ROOT}/{region}/planning.json"


def read_holds(store: Store, region: str, *, excluding: str) -> list[FleetEntry]:
    """Every fleet run's holds in `region` but run `excluding`'s own (a re-run plans its own
    afresh), each dated by the store's write time."""
    prefix = holds_prefix(region)
    found = []
    for info in store.list(prefix):
        if info.key.removeprefix(prefix) == f"{excluding}.json":
            continue
        try:
            entry = FleetEntry.model_validate_json(b"".join(store.read(info.key)))
        except NotFound:  # removed while listed: it holds nothing now
            continue
        except (ValidationError, ValueError) as e:
            raise HoldsUnknown(
                f"{store.uri}/{info.key}: not a fleet run's holds ({str(e).splitlines()[0][:120]}): what it "
                "holds is unknown; fix or remove it, then re-run"
            ) from None
        found.append(entry.model_copy(update={"recorded_at": info.updated}))
    return found


def write_holds(store: Store, region: str, entry: FleetEntry) -> None:
    """Write (or rewrite) fleet run `entry.run_id`'s holds: only that run writes its key, so a
    retry, or a re-run of the run, writes the same object again."""
    store.put(f"{holds_prefix(region)}{entry.run_id}.json", entry.model_dump_json().encode())


@contextmanager
def planning(
    store: Store,
    region: str,
    run_id: str,
    *,
    lease_s: float = DEFAULT_LEASE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold `region`'s planning lock for the block. Another run planning holds it for moments,
    so this waits for it, at most one lease and a poll (a planner that died lets it lapse by
    then); `HoldsUnknown` after that, or when the store does not answer."""
    lock = RunbookLock(
        store, f"region {region}", run_id, action="fleet-plan", key=planning_lock_key(region), lease_s=lease_s
    )
    until = time.monotonic() + lease_s + PLANNING_POLL_S
    while True:
        try:
            lock.acquire()
            break
        except StandDown as e:
            if time.monotonic() >= until:
                raise HoldsUnknown(f"{store.uri}: {e}") from None
            sleep(PLANNING_POLL_S)
    try:
        yield
    finally:
        lock.release()
