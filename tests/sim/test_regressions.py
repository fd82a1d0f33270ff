"""Every violation the simulator found, as a scripted history that reads like its incident.

Each history pins the world's parameters (the rest are the plain ones) and scripts its
faults exactly (`Fault`: who, what request, when); every other decision is the plain one.
The cases of issue #27 that today's code still has are marked `xfail(strict=True)`: the
history violates the named invariant today; when the fix lands it no longer does, the
test passes, strict xfail fails it, and the mark comes off. The last tests are histories
whose invariants hold today and must keep holding.
"""

from __future__ import annotations

import pytest

from lifeboat_dr.testing.sim import ListChoices, Scenario, run_history
from lifeboat_dr.testing.sim.run import schedule_lines
from lifeboat_dr.testing.sim.world import OUTAGES, SKEWS, Fault

PARTITION, DEAD, STALL, JOB_LOST = (OUTAGES.index(o) for o in ("partition", "dead", "stall", "job-lost"))
BEHIND, AHEAD = SKEWS.index((-600.0, 0.0)), SKEWS.index((600.0, 0.0))
HEAL_AFTER_150_S, HEAL_AFTER_40_S, NO_FAILBACK = 3, 2, 1


def history(name: str, *script: Fault, **pins):
    return run_history(ListChoices([]), scenario=Scenario(name, pins=pins, script=tuple(script)))


def holds(h, *invariants: str) -> None:
    """None of `invariants` is violated (the schedule is printed when one is)."""
    broken = [v for v in h.violations if v.invariant in invariants]
    assert not broken, "\n".join([v.line() for v in broken] + schedule_lines(h))


def xfail_27(case: str):
    return pytest.mark.xfail(strict=True, reason=f"#27 not fixed yet: {case}")


@xfail_27("a store that does not answer is read as 'no lease' (critical)")
def test_a_replicator_that_cannot_read_the_active_stores_lease_copies_nothing_from_the_zombie():
    # The fence reached the secondary alone (the primary was cut off); after the heal the
    # secondary answers its lease GET with 503 for 19 s: replication must not act on the
    # primary's old record ("primary is active, epoch 0") and copy the zombie's checkpoints.
    h = history(
        "unanswering-store",
        Fault(
            "error",
            actor="replicator",
            op="read",
            site="secondary",
            key="_lifeboat/lease.json",
            after=181.0,
            until=200.0,
            times=0,
        ),
        outage=PARTITION,
        heal_after=HEAL_AFTER_150_S,
        failback=NO_FAILBACK,
    )
    holds(h, "fenced-out-copied", "active-overwritten", "newest-deleted", "none-certifiable")


@xfail_27("a copy in flight when the fence lands overwrites the active lineage (high)")
def test_a_copy_planned_before_the_fence_never_lands_over_the_active_lineage_after_it():
    # A pass copying the primary's step 20 times out reading its manifest just before the
    # region is cut off; its retries outlive the outage, the failover and the resumed job's
    # own step 20, and land on the secondary after the heal.
    h = history(
        "copy-in-flight",
        Fault(
            "timeout",
            actor="replicator",
            op="read",
            site="primary",
            key="step-00000020/lifeboat-manifest.json",
        ),
        outage_at=1,
        replicate_every=1,
    )
    holds(h, "active-overwritten")


@xfail_27("the fence sealed by time, the zombie's clock 10 min behind (high)")
def test_a_zombie_whose_clock_runs_10_minutes_behind_is_never_taken_for_the_active_lineage():
    # The failover fences the secondary alone and seals epoch 0 at its own clock; the zombie
    # stamps its commits 10 min early, so they look older than the fence: retention on the
    # standby keeps them and deletes the active lineage's, the failback resumes from them.
    h = history("zombie-clock-behind", outage=PARTITION, **{"clock:primary-trainer": BEHIND})
    holds(h, "newest-deleted", "none-certifiable", "certified-bad", "resumed-bad", "fenced-out-copied")


@xfail_27("a control-plane clock 10 min ahead breaks the seal the same way (high)")
def test_a_control_plane_clock_10_minutes_ahead_never_makes_the_zombies_commits_count():
    h = history("control-plane-clock-ahead", outage=PARTITION, **{"clock:cp-a": AHEAD})
    holds(h, "fenced-out-copied", "resumed-bad", "newest-deleted")


@xfail_27("a primary clock 10 min ahead gives a negative RPO, recorded as 0 (high)")
def test_the_rpo_is_never_negative_when_the_primarys_clock_runs_10_minutes_ahead():
    h = history("primary-clock-ahead", outage=DEAD, **{"clock:primary-trainer": AHEAD})
    holds(h, "ledger-negative-rpo")


@xfail_27("RPO and ledger times from one machine's clock (high)")
def test_the_rpo_is_never_negative_when_the_control_planes_clock_runs_10_minutes_behind():
    h = history("control-plane-clock-behind", outage=DEAD, **{"clock:cp-a": BEHIND})
    holds(h, "ledger-negative-rpo")


@xfail_27("a dropped reply to the commit marker's PUT crashes the training loop (medium)")
def test_a_lost_reply_to_the_commit_marker_does_not_stop_a_trainer_whose_commit_landed():
    h = history(
        "lost-commit-reply",
        Fault("lost-reply", actor="primary-trainer", op="put", key="lifeboat-commit.json"),
        outage=JOB_LOST,
    )
    holds(h, "commit-landed-stopped")


@xfail_27("a full secondary at the fence raises a bare OSError [Errno 28] (low)")
def test_a_full_secondary_at_the_fence_stops_the_failover_with_one_line_not_an_oserror():
    h = history(
        "full-store-at-fence",
        Fault("full", actor="failover", op="put", key="_lifeboat/lease.json", phase="fence", times=0),
        outage=DEAD,
    )
    holds(h, "bare-error")


@xfail_27("the ledger records every action that happened: a failback's fence (found by the simulator)")
def test_a_failback_whose_fence_landed_records_the_fence_though_what_follows_it_failed():
    # The lease moves to the primary, then listing the primary fails for the whole step
    # (hand-back, certification): the walk fails "before fenced" though it fenced.
    h = history(
        "failback-fence-half-done",
        Fault("error", actor="failback", phase="fence", op="list", site="primary", times=0),
        heal_after=HEAL_AFTER_40_S,
    )
    holds(h, "ledger-missed")


# -- what holds today, and must keep holding ------------------------------------------------
def test_a_calm_history_fails_over_and_back_with_every_invariant_holding():
    h = history("calm")
    assert h.violations == [], "\n".join(v.line() for v in h.violations)
    assert h.outcomes == {"fo-1": "completed", "fb-1": "completed"}


def test_two_control_planes_failing_over_at_once_fence_once_and_one_stands_down():
    h = history("two-control-planes", second_control_plane=1, outage=PARTITION)
    holds(h, "second-fence", "self-fenced", "restarted", "torn-down")
    assert sorted(h.outcomes.values()).count("stood-down") >= 1


def test_a_partitioned_zombie_with_true_clocks_never_reaches_the_active_site():
    h = history("zombie", outage=PARTITION, heal_after=HEAL_AFTER_40_S)
    holds(h, "fenced-out-copied", "active-overwritten", "certified-bad", "resumed-bad")
    assert h.outcomes["fo-1"] == "completed"
