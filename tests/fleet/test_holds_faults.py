"""What fleet runs hold, kept in the region's lock store (`core/fleet/holds.py`), on moto's S3
behind the loopback fault proxy: a listing that answers 503 or hangs is unknown, never "nothing
held" (partial); a write whose reply was lost after it landed is there for the next run
(half-done); a record is dated by the store, not by its writer's clock (clocks disagree); two
planners of one region take turns, and a planner that died lets the lock lapse (twice)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fleet.holds import (
    HoldsUnknown,
    holds_prefix,
    planning,
    planning_lock_key,
    read_holds,
    write_holds,
)
from lifeboat_dr.core.fleet.plan import Place
from lifeboat_dr.core.fleet.record import FleetEntry, FleetJobRecord, held_since
from lifeboat_dr.core.lock import Holder
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import new_s3_bucket

pytestmark = pytest.mark.timeout(180)
REGION = "aws-us-east-1"
USC1_H100 = Place("gcp/us-central1", "H100")


def holds(run_id: str, gpus: int = 96, recorded_at: datetime | None = None) -> FleetEntry:
    job = FleetJobRecord(
        runbook=f"job-of-{run_id}",
        workload="pretraining",
        rto_target_s=1800,
        outcome="planned",
        place=f"{USC1_H100.infra} {USC1_H100.accelerator}",
        gpus=gpus,
    )
    return FleetEntry(
        fleet="fleet-x",
        run_id=run_id,
        plan_digest="d",
        decision="planned",
        jobs=[job],
        **({"recorded_at": recorded_at} if recorded_at else {}),
    )


@pytest.mark.parametrize("action", ["503", "delay"])
def test_a_listing_that_fails_or_hangs_is_unknown_never_nothing_held(proxied, action):
    proxy, store, direct = proxied
    write_holds(direct, REGION, holds("fleet-a"))
    proxy.inject(action, "list-type=2", times=None, seconds=6.0)

    with pytest.raises(ProviderUnavailable):
        read_holds(store, REGION, excluding="fleet-b")

    proxy.clear()
    (found,) = read_holds(store, REGION, excluding="fleet-b")
    assert found.run_id == "fleet-a"


def test_a_hold_whose_reply_was_lost_after_it_landed_is_there_for_the_next_run(proxied):
    proxy, store, direct = proxied
    store.max_attempts = 5
    dropped = proxy.inject("drop_reply", f"PUT /{direct.bucket}/control/{holds_prefix(REGION)}fleet-a.json")

    write_holds(store, REGION, holds("fleet-a"))  # the retry writes the same record again

    assert dropped.hit == 1
    earlier = read_holds(direct, REGION, excluding="fleet-b")
    assert held_since(earlier, datetime.now(UTC) - timedelta(minutes=5), ()).gpus == {USC1_H100: 96}


def test_a_hold_is_dated_by_the_store_not_by_its_writers_clock(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    outage = datetime.now(UTC) - timedelta(minutes=10)
    write_holds(
        store, REGION, holds("fleet-a", recorded_at=outage - timedelta(days=1))
    )  # its clock a day behind

    earlier = read_holds(store, REGION, excluding="fleet-b")

    assert earlier[0].recorded_at > outage
    assert held_since(earlier, outage, ()).gpus == {USC1_H100: 96}


def test_an_unreadable_hold_is_unknown_naming_its_key(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    store.put(f"{holds_prefix(REGION)}fleet-torn.json", b'{"fleet": "fleet-x", "run_id"')

    with pytest.raises(HoldsUnknown, match=f"{holds_prefix(REGION)}fleet-torn.json: not a fleet run's holds"):
        read_holds(store, REGION, excluding="fleet-b")


def test_two_planners_of_one_region_take_turns(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    order: list[str] = []
    first_in = threading.Event()

    def first():
        with planning(store, REGION, "fleet-a"):
            first_in.set()
            time.sleep(1.5)
            order.append("a done")

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(30)
    with planning(store, REGION, "fleet-b"):
        order.append("b in")
    thread.join(30)

    assert order == ["a done", "b in"]


def test_a_planner_that_died_holding_the_lock_lets_it_lapse_within_a_lease(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    now = datetime.now(UTC)
    dead = Holder(
        "region aws-us-east-1", "fleet-dead", "fleet-plan", "t", now, now + timedelta(seconds=2), 2.0
    )
    store.put(planning_lock_key(REGION), dead.to_json())  # taken, never renewed nor released: killed

    began = time.monotonic()
    with planning(store, REGION, "fleet-b", lease_s=2.0):
        waited = time.monotonic() - began

    assert 0.4 < waited < 2.0 + 2.0  # a lease by the store's whole-second clock, and a poll


def test_a_planning_lock_held_past_the_wait_fails_the_plan_as_unknown(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    with (
        planning(store, REGION, "fleet-a", lease_s=3.0),
        pytest.raises(HoldsUnknown, match="fleet-plan run fleet-a"),
        planning(store, REGION, "fleet-b", lease_s=3.0),
    ):
        pass  # fleet-a, alive and renewing, still holds it after the wait
