"""Grouping one region's confirmed outages into one fleet run (`core/fleet/group.py`), on the
memory store and moto's S3 server (the kill test also on the file store: a killed child must
share the store): twice (duplicate alerts, one group), half-done (the taker killed mid-window,
the next run reclaims with the same idempotency key), after (a later outage of the region,
once the fleet run ended, groups afresh), hostile (forged markers and group records)."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from lifeboat_dr.core.fleet.group import group_key, group_outage, lock_key, marker_prefix, region_of
from lifeboat_dr.kernel.errors import StandDown
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.memory_store import MemoryStore

pytestmark = pytest.mark.timeout(120)
REGION = region_of("aws/us-east-1")
MEMBERS = ("llama-70b", "mistral-sft", "code-pretrain")


def _s3(request):
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    endpoint = request.getfixturevalue("s3_endpoint")
    return S3Store(new_s3_bucket(endpoint), "control", endpoint_url=endpoint)


@pytest.fixture(params=["memory", "s3-moto"])
def store(request):
    return MemoryStore() if request.param == "memory" else _s3(request)


def timing(store) -> tuple[float, float]:
    """(window, lease): S3 dates objects in whole seconds."""
    return (2.0, 2.5) if store.uri.startswith("s3://") else (1.0, 1.5)


class FakePrefect:
    """Run creation as Prefect's: one run per idempotency key, the same run for the key again."""

    def __init__(self):
        self.runs: dict[str, tuple[str, list[str]]] = {}
        self.ended: set[str] = set()
        self.calls = 0

    def start(self, runbooks: list[str], key: str) -> str:
        self.calls += 1
        return self.runs.setdefault(key, (f"fleet-run-{len(self.runs) + 1}", list(runbooks)))[0]

    def run_ended(self, run_id: str) -> bool:
        return run_id in self.ended


def group(store, prefect, runbook, run_id=None, **kw):
    window, lease = timing(store)
    return group_outage(
        store,
        region=REGION,
        runbook=runbook,
        run_id=run_id or f"run-{runbook}",
        members=MEMBERS,
        window_s=kw.pop("window_s", window),
        start_fleet=prefect.start,
        run_ended=prefect.run_ended,
        lease_s=lease,
        **kw,
    )


def taker_in_thread(store, prefect, runbook):
    out: dict = {}

    def go():
        try:
            out["grouped"] = group(store, prefect, runbook)
        except BaseException as e:
            out["error"] = e

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 30
    while not _exists(store, group_key(REGION)):  # the window is open once the group is written
        assert time.monotonic() < deadline and thread.is_alive(), out
        time.sleep(0.05)
    return thread, out


def _exists(store, key) -> bool:
    return any(i.key == key for i in store.list(key))


def test_duplicate_alerts_of_two_runbooks_give_one_group_and_one_fleet_run(store):
    prefect = FakePrefect()
    thread, out = taker_in_thread(store, prefect, "llama-70b")
    with pytest.raises(
        StandDown, match=r"mistral-sft joined the group of aws-us-east-1.*fleet-group run run-llama-70b"
    ):
        group(store, prefect, "mistral-sft")
    for again in ("llama-70b", "mistral-sft"):  # each alert again (the HA Alertmanager's other replica)
        with pytest.raises(StandDown, match="fleet-group run run-llama-70b"):
            group(store, prefect, again, run_id=f"dup-{again}")
    thread.join(30)

    grouped = out["grouped"]
    assert grouped.runbooks == ("llama-70b", "mistral-sft") and not grouped.reused
    assert grouped.key.startswith("fleet-aws-us-east-1-")
    assert prefect.calls == 1 and list(prefect.runs.values()) == [
        (grouped.fleet_run_id, ["llama-70b", "mistral-sft"])
    ]
    # the lock is free now; a duplicate still finds the fleet run under way and names it
    with pytest.raises(
        StandDown,
        match=rf"fleet run {grouped.fleet_run_id} of aws-us-east-1 is under way.*mistral-sft is in it",
    ):
        group(store, prefect, "mistral-sft", run_id="dup-late")
    with pytest.raises(StandDown, match="code-pretrain was confirmed after it started: it waits"):
        group(store, prefect, "code-pretrain")
    assert prefect.calls == 1


def test_after_the_fleet_run_ended_a_later_outage_of_the_region_groups_afresh(store):
    prefect = FakePrefect()
    window, _ = timing(store)
    first = group(store, prefect, "llama-70b")
    with pytest.raises(StandDown):  # under way
        group(store, prefect, "mistral-sft")
    prefect.ended.add(first.fleet_run_id)
    time.sleep(window + 1.2)  # the first outage's markers are older than a window now

    group_two = group(store, prefect, "code-pretrain")

    assert group_two.key != first.key and group_two.fleet_run_id != first.fleet_run_id
    assert group_two.runbooks == (
        "code-pretrain",
    )  # llama-70b's and mistral-sft's markers are the old outage's
    assert prefect.calls == 2


def test_forged_markers_and_an_unreadable_group_record_are_ignored_with_a_clear_log(store, caplog):
    prefect = FakePrefect()
    prefix = marker_prefix(REGION)
    store.put(group_key(REGION), b"\x00not a group")
    store.put(prefix + "code-pretrain", b"{not json")
    store.put(
        prefix + "mistral-sft",
        json.dumps({"runbook": "llama-70b", "confirmed_at": "2026-12-03T00:00:00+00:00"}).encode(),
    )
    store.put(
        prefix + "rogue",
        json.dumps({"runbook": "rogue", "confirmed_at": "2026-12-03T00:00:00+00:00"}).encode(),
    )
    store.put(prefix + "no-time", json.dumps({"runbook": "no-time", "confirmed_at": 7}).encode())

    with caplog.at_level(logging.WARNING, logger="lifeboat.fleet.group"):
        grouped = group(store, prefect, "llama-70b")

    assert grouped.runbooks == ("llama-70b",) and prefect.calls == 1
    said = caplog.text
    assert "ignored an unreadable group record" in said
    assert f"ignored the join marker {prefix}code-pretrain: not a join marker (JSONDecodeError" in said
    assert (
        f"ignored the join marker {prefix}mistral-sft: names runbook 'llama-70b' under the key of 'mistral-sft'"
        in said
    )
    assert f"ignored the join marker {prefix}rogue: 'rogue' is no runbook deployed in this region" in said
    assert f"ignored the join marker {prefix}no-time: not a join marker (TypeError" in said


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lifeboat_dr.core.fleet.group import group_outage
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.providers.storage.s3 import S3Store

    uri, endpoint, flag, window, lease = sys.argv[1:6]
    store = LocalStore(uri) if not endpoint else S3Store(uri, "control", endpoint_url=endpoint)

    def sleep(seconds):  # the window's wait: say so, then wait (and be killed in it)
        Path(flag).write_text("waiting")
        time.sleep(600)

    group_outage(store, region="aws-us-east-1", runbook="llama-70b", run_id="run-dead",
                 members=("llama-70b", "mistral-sft"), window_s=float(window), lease_s=float(lease),
                 start_fleet=lambda names, key: sys.exit("started a fleet run"), run_ended=lambda r: False,
                 sleep=sleep)
    """
)


@pytest.mark.processes
@pytest.mark.parametrize("backend", ["local", "s3-moto"])
def test_a_taker_killed_mid_window_is_reclaimed_a_lease_later_with_the_same_idempotency_key(
    backend, request, tmp_path
):
    if backend == "local":
        store, child_args = LocalStore(tmp_path / "control"), [str(tmp_path / "control"), ""]
    else:
        store = _s3(request)
        child_args = [store.uri.removeprefix("s3://").split("/")[0], request.getfixturevalue("s3_endpoint")]
    window, lease = timing(store)
    flag = tmp_path / "waiting"
    child = subprocess.Popen([sys.executable, "-c", CHILD, *child_args, str(flag), str(window), str(lease)])
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the taker never reached its window"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)  # mid-window: it renews nothing and releases nothing
    child.wait(10)
    dead_key = json.loads(b"".join(store.read(group_key(REGION))))["key"]
    prefect = FakePrefect()
    with pytest.raises(StandDown, match="fleet-group run run-dead"):  # still within its lease
        group(store, prefect, "mistral-sft")
    time.sleep(lease + 1.2)  # its lease lapses (S3's whole seconds may see it a second late)

    again = group(store, prefect, "llama-70b", run_id="run-dead-rerun")  # Alertmanager repeats its alert

    assert again.reused and again.key == dead_key
    assert again.runbooks == ("llama-70b", "mistral-sft")  # the dead taker's window's markers, grouped again
    assert prefect.calls == 1
    assert json.loads(b"".join(store.read(group_key(REGION))))["fleet_run_id"] == again.fleet_run_id
    assert json.loads(b"".join(store.read(lock_key(REGION))))["released"] is True


def test_the_taker_is_listed_though_its_kept_marker_aged_past_the_bound_before_the_group_opened():
    """A duplicate's marker, found young at join and kept, may be older than one window before
    the group opened (the lock and the group record took that long): the taker is still listed,
    another runbook's marker that old is not (it belongs to an earlier window)."""
    from datetime import UTC, datetime, timedelta

    from lifeboat_dr.core.fleet.group import Group, join, listed

    now = [datetime(2026, 12, 3, 9, 0, tzinfo=UTC)]
    store = MemoryStore(clock=lambda: now[0])
    for runbook in ("llama-70b", "mistral-sft"):
        join(store, REGION, runbook, f"run-{runbook}", 60, clock=lambda: now[0])
    now[0] += timedelta(seconds=61)
    opened = Group("fleet-k", now[0], 60.0)

    assert listed(store, REGION, opened, MEMBERS, taker="llama-70b") == ["llama-70b"]
    assert listed(store, REGION, opened, MEMBERS) == []
    assert listed(store, REGION, opened, MEMBERS, taker="intruder") == []  # not a member: never listed
