"""Issue #27's cases as history shapes: each pins the parameters its case needs and raises
the faults it is about; everything else is still drawn from the seed.

`pins` name a parameter of `World.draw_parameters` and the index of its option (0 is the
first option listed there); `rates` raise the chance of a non-zero choice for a kind of
decision (`fault:<actor kind>:<op>`, `crash:<actor kind>`, `param:…`).
"""

from __future__ import annotations

from lifeboat_dr.testing.sim.world import OUTAGES, SKEWS, Scenario


def _outage(kind: str) -> int:
    return OUTAGES.index(kind)


def _skew(skew: float, jump: float = 0.0) -> int:
    return SKEWS.index((skew, jump))


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "unanswering-store",
            pins={"outage": _outage("partition"), "heal_after": 2, "failback": 1},
            rates={"fault:replicator:read": 0.25, "fault:replicator:list": 0.1},
            about="after a fence that reached the secondary alone, the active store half-answers "
            "the replicator's lease reads (critical: read as 'no lease', epoch 0)",
        ),
        Scenario(
            "copy-in-flight",
            pins={
                "outage": _outage("job-lost"),
                "replicate_every": 1,
                "detect_after": 1,
                "approval_after": 1,
            },
            rates={"fault:replicator": 0.05},
            about="a replication pass planned before the fence copies over the active lineage after it",
        ),
        Scenario(
            "zombie-clock-behind",
            pins={"outage": _outage("partition"), "clock:primary-trainer": _skew(-600.0), "heal_after": 0},
            about="the fence sealed by time, the zombie's clock 10 min behind: its commits look "
            "older than the fence",
        ),
        Scenario(
            "control-plane-clock-ahead",
            pins={"outage": _outage("partition"), "clock:cp-a": _skew(600.0), "heal_after": 0},
            about="the control plane's clock 10 min ahead seals the epoch in the future",
        ),
        Scenario(
            "primary-clock-ahead",
            pins={"outage": _outage("dead"), "clock:primary-trainer": _skew(600.0)},
            about="the primary's clock 10 min ahead: its checkpoints are written 'after' the outage (RPO < 0)",
        ),
        Scenario(
            "rerun-after-crash",
            pins={"outage": _outage("dead"), "heal_after": 1},
            rates={"crash:failover": 0.03, "param:rerun": 0.0},
            about="a failover killed between any two requests and re-run with its run id",
        ),
        Scenario(
            "retention-before-fence",
            pins={"outage": _outage("job-lost"), "replicator_machine": 1, "replicate_every": 1},
            about="retention on another worker than the failover: 'in use by a failover' reads a local file",
        ),
        Scenario(
            "lost-commit-reply",
            pins={"outage": _outage("job-lost")},
            rates={"fault:primary-trainer:put": 0.3, "fault:resumed-trainer:put": 0.3},
            about="a dropped reply to the commit marker's PUT stops the trainer though the commit landed",
        ),
        Scenario(
            "full-store-at-fence",
            pins={"outage": _outage("dead")},
            rates={"fault:failover:put": 0.4},
            about="a full secondary when the fence writes the lease",
        ),
        Scenario(
            "two-control-planes",
            pins={"second_control_plane": 1, "outage": _outage("partition")},
            about="two control planes (two automations, two workers) fail over at once: one lock in the secondary store",
        ),
        Scenario(
            "failback",
            pins={"heal_after": 2, "failback": 0},
            about="a failback after the heal: reverse replication, the fence, the standby's stop, the hand-back",
        ),
    )
}
