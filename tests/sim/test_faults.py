"""The faults a request can meet, as the caller sees them: a reply lost after the write
landed, a read cut short, a full store, a partition that only the primary region's own job
sees through, a crash that silences the whole process."""

from __future__ import annotations

import pytest

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.testing.sim import ListChoices, Scenario
from lifeboat_dr.testing.sim.scheduler import Scheduler
from lifeboat_dr.testing.sim.world import Fault, World


def world_with(*script: Fault, **pins) -> World:
    return World(Scheduler(ListChoices([])), Scenario("test", pins=pins, script=tuple(script)))


def run(world: World, body, *, kind="replicator", region="control", at=0.0):
    """Run `body()` as one actor of `world`; returns what it returned or raised."""
    out = {}

    def actor():
        try:
            out["value"] = body()
        except Exception as e:
            out["error"] = e

    a = world.sched.spawn("tester", kind, actor, at=at)
    a.region = region
    world.sched.run()
    world.close()
    return out


def test_a_lost_reply_raises_though_the_write_landed():
    world = world_with(Fault("lost-reply", op="put", key="marker"))
    out = run(world, lambda: world.stores["secondary"].put("ck/marker", b"m"))
    assert isinstance(out["error"], ProviderUnavailable) and "the write landed" in str(out["error"])
    assert world.inner("secondary").peek("ck/marker") == b"m"


def test_a_partial_read_yields_half_then_resets():
    world = world_with(Fault("partial", op="read"))
    world.inner("primary").put("blob", b"0123456789")
    got = []

    def read():
        for chunk in world.stores["primary"].read("blob"):
            got.append(chunk)

    out = run(world, read)
    assert got == [b"01234"] and isinstance(out["error"], ProviderUnavailable)


def test_a_full_store_refuses_a_write_in_one_line_as_a_full_file_store_does():
    world = world_with(Fault("full", op="put"))
    out = run(world, lambda: world.stores["secondary"].put("x", b"1"))
    assert isinstance(out["error"], ProviderUnavailable) and "No space left" in str(out["error"])
    assert world.inner("secondary").peek("x") is None


@pytest.mark.parametrize(("region", "reaches"), [("control", False), ("primary", True)])
def test_a_partition_cuts_the_primary_store_off_from_all_but_its_own_region(region, reaches):
    world = world_with(outage=0)  # a partition, from outage_at on
    world.inner("primary").put("k", b"v")
    out = run(
        world, lambda: b"".join(world.stores["primary"].read("k")), region=region, at=world.outage_at + 1
    )
    assert (out.get("value") == b"v") is reaches
    assert world.sched.now >= world.outage_at + 1 + (0 if reaches else 5)  # a timeout costs the deadline


def test_a_crash_kills_the_process_before_its_request_lands():
    world = world_with(Fault("crash", op="put"))
    out = run(world, lambda: world.stores["secondary"].put("x", b"1"))
    assert out == {}  # nothing returned, nothing raised to the body: the process died
    assert world.inner("secondary").peek("x") is None
    assert world.coverage.met[("crash", "replicator", "start")] == 1


def test_an_out_of_tree_store_runs_the_same_history_as_the_memory_store():
    from lifeboat_dr.testing.memory_store import MemoryStore
    from lifeboat_dr.testing.sim import run_history

    class Backend:  # a store with only the six primitives: no peek, no snapshot
        def __init__(self, name, clock):
            self._s = MemoryStore(name, clock=clock)
            self.uri, self.capabilities = self._s.uri, self._s.capabilities

        def __getattr__(self, name):
            if name in ("peek", "snapshot", "corrupt"):
                raise AttributeError(name)
            return getattr(self._s, name)

    plain = run_history(ListChoices([]))
    theirs = run_history(ListChoices([]), store_factory=Backend)
    assert theirs.trace == plain.trace and theirs.outcomes == plain.outcomes
    assert [v.line() for v in theirs.violations] == [v.line() for v in plain.violations]
