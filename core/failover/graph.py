"""The failover's step graph: the one table of its order, milestones and labels.

    detect ─► confirm ─┬─► certify ──┬─► approval ─► fence ─► provision ─► resume ─► prove
                       ├─► plan ─────┤
                       └─► prestage ─┘
    provision_before_approval: provision ◄ plan; resume ◄ provision, fence

Fencing comes after the human decision: a rejected or timed-out run leaves the lease and
the primary as they were. Each `Step` names what it waits for, the ledger milestone it
reaches and the label the timeline draws. With `provision_before_approval`, provisioning
waits for the plan instead of the fence (it acquires GPUs, starts no job), and the resume
for both the GPUs and the fence. The walker (`lifeboat_dr.core.failover.walk`), the ledger
(`lifeboat_dr.core.ledger`), the timeline picture and the critical-path benchmark all read this
table; nothing else writes the order down. The picture above is `diagram()`'s (`python -m
lifeboat_dr.core.failover.graph` prints it; docs/DESIGN.md shows it too, and a test holds both to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    name: str  # the FailoverSteps call that performs it ("detect" and "approval" are not calls)
    after: tuple[str, ...]  # steps it waits for
    milestone: str  # the ledger milestone reached when it ends
    label: str  # how the timeline names it
    early_after: tuple[str, ...] | None = None  # waits for these instead with provisioning before approval
    marks: tuple[str, ...] = ()  # milestones reached inside the step, before `milestone`
    starts_at: str | None = None  # milestone its span starts at when not the end of what it waits for


STEPS: tuple[Step, ...] = (
    Step("detect", (), "detected", "detect", starts_at="outage_start"),
    Step("confirm", ("detect",), "confirmed", "confirm"),
    Step("certify", ("confirm",), "certified", "certify"),
    Step("plan", ("confirm",), "planned", "plan"),
    Step("prestage", ("confirm",), "prestaged", "prestage"),
    Step(
        "approval",
        ("certify", "plan", "prestage"),
        "approval_granted",
        "approval",
        marks=("approval_requested",),
        starts_at="approval_requested",
    ),
    Step("fence", ("approval",), "fenced", "fence"),
    Step("provision", ("fence",), "provisioned", "provision", early_after=("plan",)),
    Step(
        "resume",
        ("provision",),
        "first_step",
        "resume (load checkpoint, first step)",
        early_after=("provision", "fence"),
        marks=("checkpoint_loaded",),
    ),
    Step("prove", ("resume",), "parity_passed", "loss parity"),
)

BY_NAME: Mapping[str, Step] = {s.name: s for s in STEPS}

RTO_END = "first_step"  # the RTO runs to the first healthy step on the secondary

# Every ledger milestone, in the order a failover normally reaches them.
MILESTONES: tuple[str, ...] = (
    "outage_start",
    *(m for s in STEPS for m in (*s.marks, s.milestone)),
)


def step_graph(provision_before_approval: bool = False) -> Mapping[str, tuple[str, ...]]:
    """step -> the steps it waits for, as the flow walks it."""
    return {
        s.name: (s.early_after if provision_before_approval and s.early_after is not None else s.after)
        for s in STEPS
    }


def critical_path(
    durations: Mapping[str, float], graph: Mapping[str, tuple[str, ...]] | None = None
) -> float:
    """Longest path through the step graph: the best RTO concurrency can give."""
    graph = graph or step_graph()
    finish: dict[str, float] = {}

    def end(step: str) -> float:
        if step not in finish:
            finish[step] = max((end(d) for d in graph[step]), default=0.0) + durations.get(step, 0.0)
        return finish[step]

    return max(end(s) for s in graph)


def diagram() -> str:
    """The step graph as text: a chain with its fans (a step that waits for one step, or for
    every step of a fan), then what waits for what else with provisioning before approval."""
    graph, early = step_graph(), step_graph(provision_before_approval=True)
    depth: dict[str, int] = {}
    for s in STEPS:  # every step is listed after the steps it waits for
        depth[s.name] = max((depth[d] + 1 for d in graph[s.name]), default=0)
    levels = [[s.name for s in STEPS if depth[s.name] == n] for n in range(max(depth.values()) + 1)]
    rows = [""]
    for before, level in zip([[]] + levels, levels, strict=False):
        if any(set(graph[n]) != set(before) for n in level) or len(level) > 1 and len(before) != 1:
            raise ValueError(f"no picture for {level} waiting for {[graph[n] for n in level]}")
        if len(level) == 1:
            rows[0] += ("─► " if len(before) > 1 else " ─► " if before else "") + level[0]
            continue
        rows[0] += " ─"
        column, width = len(rows[0]), max(map(len, level))
        rows += [""] * (len(level) - len(rows))
        for i, name in enumerate(level):
            fork, join = ("┬", "┬") if i == 0 else ("└", "┘") if i == len(level) - 1 else ("├", "┤")
            rows[i] = rows[i].ljust(column) + fork + f"─► {name} " + "─" * (width - len(name) + 1) + join
    changed = "; ".join(f"{n} ◄ {', '.join(early[n])}" for n in graph if early[n] != graph[n])
    return "\n".join([*(r.rstrip() for r in rows), f"provision_before_approval: {changed}"])


if __name__ == "__main__":
    print(diagram())
