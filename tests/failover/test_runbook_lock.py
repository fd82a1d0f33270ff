"""The runbook's failover lock (`lifeboat_dr.core.lock`) on every store that can hold it: one
live holder, released on exit, lapsing one lease after its holder stopped renewing it, an
earlier attempt of the same run waited out, a record written by hand never holding it for
longer than a lease."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifeboat_dr.core.lock import LOCK_KEY, Holder, RunbookLock
from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable, StandDown
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.memory_store import MemoryStore

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
LEASE = 1.5  # renewed every 0.5 s: a renewal the load delays by a second still holds it (S3: LEASE_S3)
LEASE_S3 = 2.5


@pytest.fixture(params=["local", "memory", "s3-moto", "fake-gcs"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "secondary")
    if request.param == "memory":
        return MemoryStore()
    if request.param == "fake-gcs":  # enforces the lock's conditional uploads as GCS does
        from lifeboat_dr.providers.storage.gcs import GcsStore
        from lifeboat_dr.testing.emulators import new_gcs_bucket

        endpoint = request.getfixturevalue("fake_gcs_endpoint")
        return GcsStore(new_gcs_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    endpoint = request.getfixturevalue("s3_endpoint")
    return S3Store(new_s3_bucket(endpoint), "jobs/llama", endpoint_url=endpoint)


def lease_of(store) -> float:
    return LEASE_S3 if store.uri.startswith("s3://") else LEASE


def past_a_lease(store) -> None:
    """Sleep until a record written now has lapsed by the store's clock (S3's whole seconds
    may see it up to a second late)."""
    time.sleep(lease_of(store) + (1.2 if store.uri.startswith("s3://") else 0.2))


def lock(store, run_id, **kw) -> RunbookLock:
    return RunbookLock(store, "llama", run_id, lease_s=kw.pop("lease_s", lease_of(store)), **kw)


def test_one_live_holder_at_a_time_and_released_on_exit(store):
    with lock(store, "run-a") as held:
        assert held.reclaimed is None
        time.sleep(2 * lease_of(store))  # renewed meanwhile: still held
        with pytest.raises(StandDown, match="another failover of llama holds its lock: failover run run-a"):
            lock(store, "run-b").acquire()
    with lock(store, "run-b") as next_one:  # released: the next run takes it, nothing reclaimed
        assert next_one.reclaimed is None


def test_a_holder_that_stopped_renewing_lapses_after_its_lease_and_is_named(store):
    dead = lock(store, "run-dead")
    dead.acquire()
    dead._stop.set()  # its worker died: nobody renews it, nobody releases it
    with pytest.raises(StandDown):
        lock(store, "run-next").acquire()
    past_a_lease(store)

    with lock(store, "run-next") as taken:
        assert isinstance(taken.reclaimed, Holder) and taken.reclaimed.run_id == "run-dead"
    dead.release()  # the dead holder, if it ever wakes, frees nothing that is not its own
    assert dead.lost


def test_no_workers_clock_lapses_a_live_holders_lock(store):
    """The holder's clock 10 min behind, the taker's 10 min ahead (no NTP; found by the fault
    simulator): the store's own clock judges the lease, so the live holder keeps the lock."""
    behind = lambda: datetime.now(UTC) - timedelta(minutes=10)  # noqa: E731
    ahead = lambda: datetime.now(UTC) + timedelta(minutes=10)  # noqa: E731
    with lock(store, "run-a", clock=behind), pytest.raises(StandDown, match="failover run run-a"):
        lock(store, "run-b", clock=ahead).acquire()


def test_a_record_written_by_hand_holds_the_lock_one_lease_at_most(store):
    forever = Holder(
        "llama",
        "squatter",
        "failover",
        "t",
        datetime.now(UTC),
        datetime(2999, 1, 1, tzinfo=UTC),
        lease_of(store),
    )
    store.put(LOCK_KEY, forever.to_json())
    with pytest.raises(StandDown):
        lock(store, "run-a").acquire()
    past_a_lease(store)  # nobody rewrote it for a lease: whatever it claims, it lapsed

    with lock(store, "run-a") as taken:
        assert taken.reclaimed.run_id == "squatter"


def test_an_unreadable_record_lapses_a_lease_after_its_write(store):
    store.put(LOCK_KEY, b"{'hand-edited")
    with pytest.raises(StandDown, match="an unreadable lock record"):
        lock(store, "run-a").acquire()
    past_a_lease(store)

    with lock(store, "run-a") as taken:
        assert taken.reclaimed is not None


def test_an_earlier_attempt_of_the_same_run_is_waited_out(store):
    """The run was scheduled again after its worker died: it waits for the dead attempt's lease."""
    crashed = lock(store, "run-a")
    crashed.acquire()
    crashed._stop.set()
    started = time.monotonic()

    with lock(store, "run-a") as again:
        assert again.reclaimed.run_id == "run-a"
    assert time.monotonic() - started < lease_of(store) + 2


def test_an_earlier_attempt_that_still_renews_stands_the_second_down(store):
    """Someone rescheduled a live failover run through Prefect's API: its second attempt acts on nothing."""
    with lock(store, "run-a"), pytest.raises(StandDown, match="an earlier attempt of this run"):
        lock(store, "run-a").acquire()


def test_a_store_that_ignores_preconditions_cannot_hold_the_lock():
    from dataclasses import replace

    store = MemoryStore()
    store.capabilities = replace(store.capabilities, conditional_writes=False)
    with pytest.raises(ConfigError, match="does not honour conditional writes"):
        lock(store, "run-a").acquire()


@pytest.mark.processes
def test_racing_processes_one_takes_it(tmp_path):
    """Eight processes race for a free lock in one local store: exactly one holds it."""
    race = (
        "import pathlib, sys, time\n"
        "from lifeboat_dr.core.lock import RunbookLock\n"
        "from lifeboat_dr.kernel.errors import StandDown\n"
        "from lifeboat_dr.providers.storage.local import LocalStore\n"
        "go = pathlib.Path(sys.argv[1]) / 'go'\n"
        "(pathlib.Path(sys.argv[1]) / ('ready-' + sys.argv[2])).touch()\n"
        "while not go.exists(): time.sleep(0.01)\n"
        "try:\n"
        "    with RunbookLock(LocalStore(sys.argv[1] + '/store'), 'llama', sys.argv[2], lease_s=30):\n"
        "        print('held', flush=True); time.sleep(3)\n"
        "except StandDown:\n"
        "    print('stood down', flush=True)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", race, str(tmp_path), f"run-{i}"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()  # all imported: they race from here
    said = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert said == ["held"] + ["stood down"] * 7, said


def test_a_lease_is_bounded(store):
    with pytest.raises(ConfigError):
        lock(store, "run-a", lease_s=timedelta(hours=1).total_seconds())


class LosesReplies(MemoryStore):
    """A store whose answers to the lock's writes are lost though the writes land (a reset
    after the PUT), the first `lose` of them."""

    def __init__(self, lose: int):
        super().__init__()
        self.lose = lose

    def put(self, key, data, **kw):
        info = super().put(key, data, **kw)
        if key == LOCK_KEY and self.lose:
            self.lose -= 1
            raise ProviderUnavailable(f"{key}: connection reset (the write landed)")
        return info


def test_a_lost_reply_neither_fails_the_take_nor_loses_the_lock():
    """Found by the fault simulator: the take's answer lost, then a renewal's; the holder read
    its own record back, so it holds the lock, renews it, and releases it."""
    store = LosesReplies(lose=2)
    with lock(store, "run-a") as held:
        time.sleep(3 * LEASE)  # renewals, the first of them with its reply lost
        assert not held.lost
        with pytest.raises(StandDown):
            lock(store, "run-b").acquire()
    assert Holder.from_json(store.peek(LOCK_KEY)).released
