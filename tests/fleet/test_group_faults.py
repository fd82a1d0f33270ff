"""Grouping under partial failure (`core/fleet/group.py`), on moto's S3 behind the loopback
fault proxy: a store that answers 503 or hangs on the join marker, the lock or the group
record (unknown, never "no group": no fleet run starts); a create-only write whose reply was
lost after it landed (the retry recognises its own write); two callers' clocks 10 minutes
apart (one window, on the store's clock); an unfinished group found long after its window
(abandoned: neither its stale window nor its ended run is reused)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from lifeboat_dr.core.fleet.group import Group, group_key, lock_key, marker_prefix
from lifeboat_dr.kernel.errors import ProviderUnavailable, StandDown
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import new_s3_bucket
from tests.fleet.test_group import REGION, FakePrefect, group, taker_in_thread

pytestmark = pytest.mark.timeout(180)
WINDOW, LEASE = 2.0, 2.5  # what `group` (tests/fleet/test_group.py `timing`) gives an S3 store


def _path(direct, key):
    return f"/{direct.bucket}/control/{key}"


@pytest.mark.parametrize("action", ["503", "delay"])
@pytest.mark.parametrize("what", ["marker", "lock", "group"])
def test_a_store_that_fails_or_hangs_on_marker_lock_or_group_starts_no_fleet_run(proxied, action, what):
    proxy, store, direct = proxied
    key = {
        "marker": marker_prefix(REGION) + "llama-70b",
        "lock": lock_key(REGION),
        "group": group_key(REGION),
    }
    if (
        what == "group"
    ):  # a fleet run of this region is under way: a group that is unknown must not read as none
        direct.put(
            group_key(REGION),
            Group("fleet-k", datetime.now(UTC), WINDOW, "fleet-run-live", ("mistral-sft",)).to_json(),
        )
    proxy.inject(action, _path(direct, key[what]), times=None, seconds=8.0)
    prefect = FakePrefect()

    with pytest.raises((ProviderUnavailable, StandDown)) as failed:
        group(store, prefect, "llama-70b")

    assert prefect.calls == 0, failed.value  # unknown is never "no group, no lock": nothing started
    assert "fleet-run" not in str(failed.value) or what == "group"
    proxy.clear()
    if what == "group":  # with the store back, the live fleet run is found and named
        with pytest.raises(StandDown, match="fleet run fleet-run-live of aws-us-east-1 is under way"):
            group(store, prefect, "llama-70b", run_id="run-again")
        assert prefect.calls == 0


@pytest.mark.parametrize("what", ["marker", "group"])
def test_a_create_only_write_whose_reply_was_lost_is_recognised_as_its_own_on_the_retry(
    proxied, what, caplog
):
    proxy, store, direct = proxied
    key = marker_prefix(REGION) + "llama-70b" if what == "marker" else group_key(REGION)
    store.max_attempts = 5
    dropped = proxy.inject("drop_reply", f"PUT {_path(direct, key)}")
    prefect = FakePrefect()

    with caplog.at_level(logging.INFO, logger="lifeboat.fleet.group"):
        grouped = group(store, prefect, "llama-70b")

    assert dropped.hit == 1
    assert grouped.runbooks == ("llama-70b",) and prefect.calls == 1
    assert "a duplicate" not in caplog.text  # its own marker, not another alert's
    record = json.loads(b"".join(direct.read(group_key(REGION))))
    assert record["fleet_run_id"] == grouped.fleet_run_id and record["key"] == grouped.key


def test_callers_clocks_ten_minutes_apart_measure_one_window_on_the_stores_clock(s3_endpoint):
    store = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    prefect = FakePrefect()

    def ahead():
        return datetime.now(UTC) + timedelta(minutes=10)

    thread, out = taker_in_thread(store, prefect, "llama-70b")  # the taker's clock is right
    with pytest.raises(StandDown, match="fleet-group run run-llama-70b"):
        group(store, prefect, "mistral-sft", clock=ahead)  # ten minutes ahead: still in the window
    thread.join(30)
    assert out["grouped"].runbooks == ("llama-70b", "mistral-sft")

    store2 = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    behind_taker = group(
        store2, prefect, "code-pretrain", clock=lambda: datetime.now(UTC) - timedelta(minutes=10)
    )
    assert behind_taker.runbooks == (
        "code-pretrain",
    )  # ten minutes behind: waited one window, not eleven minutes
    assert prefect.calls == 2


def _stale_group(direct):
    long_ago = datetime.now(UTC) - timedelta(hours=3)
    direct.put(group_key(REGION), Group("fleet-stale-key", long_ago, WINDOW).to_json())


def test_an_unfinished_group_found_long_after_its_window_is_abandoned_not_reused(s3_endpoint, caplog):
    direct = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    _stale_group(direct)
    prefect = FakePrefect()
    prefect.runs["fleet-stale-key"] = ("fleet-run-dead", ["llama-70b"])  # the dead taker had started it

    with caplog.at_level(logging.WARNING, logger="lifeboat.fleet.group"):
        grouped = group(direct, prefect, "code-pretrain")

    assert grouped.key != "fleet-stale-key" and not grouped.reused
    assert grouped.fleet_run_id != "fleet-run-dead"
    assert "abandoned the unfinished group fleet-stale-key" in caplog.text


def test_a_reused_key_whose_fleet_run_has_ended_is_not_joined(s3_endpoint, caplog):
    direct = S3Store(new_s3_bucket(s3_endpoint), "control", endpoint_url=s3_endpoint)
    fresh = datetime.now(UTC) - timedelta(seconds=WINDOW)  # fresh: a reclaim reuses its key
    direct.put(group_key(REGION), Group("fleet-dead-key", fresh, WINDOW).to_json())
    prefect = FakePrefect()
    prefect.runs["fleet-dead-key"] = ("fleet-run-over", ["llama-70b"])
    prefect.ended.add("fleet-run-over")  # the dead taker started it; it is over (or a forged "ended")

    with caplog.at_level(logging.WARNING, logger="lifeboat.fleet.group"):
        grouped = group(direct, prefect, "code-pretrain")

    assert grouped.fleet_run_id != "fleet-run-over" and grouped.key != "fleet-dead-key"
    assert grouped.runbooks == ("code-pretrain",) and not grouped.reused
    assert "fleet run fleet-run-over has ended: a new group" in caplog.text
