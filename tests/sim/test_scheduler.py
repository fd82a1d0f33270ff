"""The scheduler: one actor at a time, every decision from the choices, time virtual, a
killed process silent from its next yield point on; histories replay exactly; the shrinker
finds the small schedule inside a long one."""

from __future__ import annotations

import threading

import pytest

from lifeboat_dr.testing.sim import ListChoices, run_history, seeded, shrink
from lifeboat_dr.testing.sim.run import format_schedule, parse_schedule
from lifeboat_dr.testing.sim.scheduler import Killed, Process, Scheduler, SeededChoices


def _counting_actors(choices, n=3, rounds=4):
    """Actors that read a shared counter, yield, then write it back plus one: the
    interleaving decides how many increments are lost."""
    sched = Scheduler(choices)
    state = {"x": 0, "inside": 0, "overlap": False}

    def body():
        for _ in range(rounds):
            state["inside"] += 1
            state["overlap"] |= state["inside"] > 1
            seen = state["x"]
            state["inside"] -= 1
            sched.point("between the read and the write")
            state["x"] = seen + 1

    for i in range(n):
        sched.spawn(f"a{i}", "toy", body)
    sched.run()
    return state, sched


def test_actors_never_run_at_once_and_the_choices_decide_the_interleaving():
    calm, _ = _counting_actors(ListChoices([]))
    racy = [_counting_actors(SeededChoices(seed, {"actor": 0.5}))[0]["x"] for seed in range(20)]
    assert calm["x"] == 12 and not calm["overlap"]  # each actor ran on: no update lost
    assert min(racy) < 12  # some interleavings lose updates ...
    assert racy == [_counting_actors(SeededChoices(seed, {"actor": 0.5}))[0]["x"] for seed in range(20)]


def test_the_same_choices_replay_the_same_interleaving():
    first, sched = _counting_actors(SeededChoices(7, {"actor": 0.5}))
    again, replay = _counting_actors(ListChoices(sched.choices.taken))
    assert (first["x"], sched.trace) == (again["x"], replay.trace)


def test_time_jumps_to_the_first_sleeper_due_and_a_killed_process_stops_at_its_next_yield():
    sched = Scheduler(ListChoices([]))
    seen = []
    victim = Process("victim")

    def sleeper():
        sched.sleep(30.0)
        seen.append(("woke", sched.now))
        sched.point("after waking")
        seen.append("never: killed while asleep")

    def killer():
        sched.sleep(10.0)
        sched.kill(victim)
        seen.append(("killed", sched.now))

    sleeping = sched.spawn("sleeper", "toy", sleeper, process=victim)
    sched.spawn("killer", "toy", killer)
    sched.run()
    assert seen == [("killed", 10.0)]
    assert sleeping.killed and sched.now == 10.0


def test_an_actor_waiting_for_what_never_comes_ends_the_history_as_hung():
    sched = Scheduler(ListChoices([]))
    never = threading.Event()
    stuck = sched.spawn("waiter", "toy", lambda: sched.wait_until(never.is_set))
    sched.run()
    assert sched.hung == ["waiter"] and stuck.killed


def test_a_killed_actor_raises_killed_at_a_yield_point_not_before():
    sched = Scheduler(ListChoices([]))
    steps = []

    def body():
        steps.append("before")
        sched.kill(sched.current.process)
        steps.append("still running until it yields")
        try:
            sched.point("a request")
        except Killed:
            steps.append("killed")
            raise

    sched.spawn("a", "toy", body)
    sched.run()
    assert steps == ["before", "still running until it yields", "killed"]


@pytest.mark.parametrize("seed", [3, 11])
def test_a_history_replays_exactly_from_its_seed_and_from_its_choices(seed):
    first = run_history(seeded(seed), seed=seed)
    again = run_history(seeded(seed), seed=seed)
    replayed = run_history(ListChoices(first.choices))
    for other in (again, replayed):
        assert other.choices == first.choices
        assert other.trace == first.trace
        assert [v.line() for v in other.violations] == [v.line() for v in first.violations]
    assert first.points > 100  # a real history: hundreds of requests


def test_the_shrinker_finds_the_two_choices_that_matter_in_a_long_list():
    def fails(values):  # "fails" when the choices at positions 41 and 89 are both non-zero
        return object() if len(values) > 89 and values[41] and values[89] else None

    long = [1, 3, 0, 2] * 60
    values, _ = shrink(long, fails, budget_s=30)
    assert [i for i, v in enumerate(values) if v] == [41, 89]
    assert values[41] == values[89] == 1
    assert parse_schedule(format_schedule(values)) == values


def test_every_seam_the_simulator_takes_over_is_still_there():
    from lifeboat_dr.testing.sim.seams import check

    assert check() == []  # a renamed pool, clock or wait would run unscheduled: fail here instead
