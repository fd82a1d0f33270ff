"""Hypothesis draws the simulator's schedules: a few non-zero choices at any positions (a
fault here, another actor first there, a parameter off its plain value), every other
choice the plain one. A violation fails with the schedule Hypothesis shrank it to, which
`make sim SCHEDULE=…` replays."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifeboat_dr.testing.sim import ListChoices, run_history
from lifeboat_dr.testing.sim.run import format_schedule, parse_schedule

# position -> value: sparse, so that most choices stay plain (a dense random list would make
# nearly every request fail)
schedules = st.dictionaries(st.integers(0, 1500), st.integers(1, 7), max_size=12).map(
    lambda d: parse_schedule(",".join(f"{p}:{v}" for p, v in sorted(d.items())))
)


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(schedules)
def test_histories_hypothesis_draws_violate_nothing(values):
    history = run_history(ListChoices(values))
    assert not history.violations, "\n".join(
        [f"make sim SCHEDULE={format_schedule(values)}", *(v.line() for v in history.violations)]
    )
