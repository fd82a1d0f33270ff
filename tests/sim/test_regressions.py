"""Every violation the simulator found, as a scripted history that reads like its incident.

Each case pins the world's parameters (the rest are the plain ones) and scripts its faults
exactly (`Fault`: who, what request, when); every other decision is the plain one. Two
tests per case: its *premise* always holds (the history reaches what it is about: the
fault hit, the fence landed, the re-run ran), so that a change of the simulator that moves
the history away from it fails loudly; and its *invariants* hold. A case today's code still
violates is marked `open_since` (a strict xfail: when its fix lands the test passes, strict
xfail fails it, and the mark comes off); every case below is fixed (`fixed` says where).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lifeboat_dr.testing.sim import ListChoices, Scenario, run_history
from lifeboat_dr.testing.sim.run import History, schedule_lines
from lifeboat_dr.testing.sim.world import OUTAGES, SKEWS, Fault

PARTITION, DEAD, STALL, JOB_LOST = (OUTAGES.index(o) for o in ("partition", "dead", "stall", "job-lost"))
BEHIND, AHEAD = SKEWS.index((-600.0, 0.0)), SKEWS.index((600.0, 0.0))
HEAL_AFTER_150_S, HEAL_AFTER_40_S = 3, 2
NO_FAILBACK, FAILBACK_AFTER_60_S = 1, 2
RERUN_AFTER_125_S = 1
CHAIN = 1  # LIFEBOAT_LEDGER_CHAIN=sites
KEEP_ONE = 1  # the standby's keep_last: 1
STEPPED_AHEAD = SKEWS.index((0.0, 600.0))  # a true clock stepped 10 min ahead mid-history


@dataclass(frozen=True)
class Case:
    name: str
    story: str
    invariants: tuple[str, ...]  # none of these may be violated
    premise: object  # History -> bool: the history reached what the case is about
    script: tuple[Fault, ...] = ()
    pins: dict | None = None
    fixed: str = ""  # what the violation was, and where it was fixed
    open_since: str | None = None  # why today's code still violates it (strict xfail)

    def run(self) -> History:
        return run_history(
            ListChoices([]), scenario=Scenario(self.name, pins=self.pins or {}, script=self.script)
        )


def fenced(h: History, run_id: str) -> bool:
    return any(run == run_id for _, _, run in h.fences)


def hit(h: History) -> bool:
    return all(h.script_hits)


def reran(h: History, run_id: str) -> bool:
    return (
        any(run == run_id and attempt == 1 for run, attempt, _, _ in h.jobs)
        and h.outcomes.get(run_id) is not None
    )


def resumed(h: History, run_id: str) -> bool:
    return any(run == run_id for run, _, _, _ in h.jobs)


def zombie_committed(h: History) -> bool:
    return any(lineage == "primary@0" and counted is False for lineage, _, counted in h.saves)


CASES = (
    Case(
        "unanswering-store",
        "The fence reached the secondary alone (the primary was cut off); after the heal the "
        "secondary answers its lease GET with 503 for two minutes: replication must not act on the "
        "primary's old record ('primary is active, epoch 0') and copy the zombie's checkpoints.",
        ("fenced-out-copied", "active-overwritten", "newest-deleted", "none-certifiable"),
        lambda h: hit(h) and fenced(h, "fo-1") and zombie_committed(h),
        script=(
            Fault(
                "error",
                actor="replicator",
                op="read",
                site="secondary",
                key="_lifeboat/lease.json",
                after=181.0,
                until=300.0,
                times=0,
            ),
        ),
        pins={"outage": PARTITION, "heal_after": HEAL_AFTER_150_S, "failback": NO_FAILBACK},
        fixed="#27: a store that does not answer is read as 'no lease' (critical)",
    ),
    Case(
        "copy-in-flight",
        "A pass copying the primary's step 20 times out reading its manifest just before the "
        "region is cut off; its retries outlive the outage, the failover and the resumed job's own "
        "step 20, and land on the secondary after the heal.",
        ("active-overwritten",),
        lambda h: hit(h) and fenced(h, "fo-1"),
        script=(
            Fault(
                "timeout",
                actor="replicator",
                op="read",
                site="primary",
                key="step-00000020/lifeboat-manifest.json",
            ),
        ),
        pins={"outage_at": 1, "replicate_every": 1},
        fixed="#27: a copy in flight when the fence lands overwrites the active lineage (high)",
    ),
    Case(
        "zombie-clock-behind",
        "The failover fences the secondary alone and seals epoch 0 by its own clock; the zombie "
        "stamps its commits 10 min early, so they look older than the fence: retention on the "
        "standby keeps them and deletes the active lineage's, the failback resumes from them.",
        ("newest-deleted", "none-certifiable", "certified-bad", "resumed-bad", "fenced-out-copied"),
        lambda h: fenced(h, "fo-1") and zombie_committed(h),
        pins={"outage": PARTITION, "clock:primary-trainer": BEHIND},
        fixed="#27: the fence sealed by time, the zombie's clock 10 min behind (high)",
    ),
    Case(
        "control-plane-clock-ahead",
        "The same with the control plane's clock 10 min ahead: the seal lies in the future.",
        ("fenced-out-copied", "resumed-bad", "newest-deleted"),
        lambda h: fenced(h, "fo-1") and zombie_committed(h),
        pins={"outage": PARTITION, "clock:cp-a": AHEAD},
        fixed="#27: a control-plane clock 10 min ahead breaks the seal the same way (high)",
    ),
    Case(
        "primary-clock-ahead",
        "The primary stamps its manifests 10 min ahead: its checkpoints were 'written after' the outage.",
        ("ledger-negative-rpo",),
        lambda h: fenced(h, "fo-1") and resumed(h, "fo-1"),
        pins={"outage": DEAD, "clock:primary-trainer": AHEAD},
        fixed="#27: a primary clock 10 min ahead gives a negative RPO, recorded as 0 (high)",
    ),
    Case(
        "control-plane-clock-behind",
        "The control plane stamps the outage 10 min early: the checkpoint looks written after it.",
        ("ledger-negative-rpo",),
        lambda h: fenced(h, "fo-1") and resumed(h, "fo-1"),
        pins={"outage": DEAD, "clock:cp-a": BEHIND},
        fixed="#27: RPO and ledger times from one machine's clock (high)",
    ),
    Case(
        "lost-commit-reply",
        "The reply to the primary's commit-marker PUT is lost though the marker landed.",
        ("commit-landed-stopped",),
        hit,
        script=(Fault("lost-reply", actor="primary-trainer", op="put", key="lifeboat-commit.json"),),
        pins={"outage": JOB_LOST},
        fixed="#27: a dropped reply to the commit marker's PUT crashes the training loop (medium)",
    ),
    Case(
        "full-store-at-fence",
        "The secondary is full when the fence writes its lease.",
        ("bare-error",),
        hit,
        script=(
            Fault("full", actor="failover", op="put", key="_lifeboat/lease.json", phase="fence", times=0),
        ),
        pins={"outage": DEAD},
        fixed="#27: a full secondary at the fence raises a bare OSError [Errno 28] (low)",
    ),
    Case(
        "retention-elsewhere",
        "Two replicators, each on its own worker: neither sees the failover's ledger file, but "
        "the ledger chain in the stores says which checkpoint the failover resumes from, so the "
        "pass that trims the standby after the heal keeps it.",
        ("in-use-deleted",),
        lambda h: fenced(h, "fo-1") and h.outcomes.get("fo-1") == "completed",
        pins={
            "outage_at": 1,
            "heal_after": HEAL_AFTER_40_S,
            "replicators": 1,
            "replicator_machine": 1,
            "ledger": CHAIN,
        },
        fixed="#27: 'in use by a failover' reads a local ledger file (medium)",
    ),
    Case(
        "rerun-restarts",
        "Killed while polling its resumed job, the failover is re-run under its run id 65 s "
        "later: it certifies the job's own newer checkpoint and starts the job again from it.",
        ("restarted",),
        lambda h: hit(h) and reran(h, "fo-1"),
        script=(Fault("crash", actor="fo-1#1", phase="resume", op="compute", key="logs"),),
        fixed="#27: a failover SIGKILLed and re-run with its run id restarts the job (high)",
    ),
    Case(
        "failback-fence-half-done",
        "The lease moves to the primary, then listing the primary fails for the rest of the fence "
        "step (hand-back, certification): the walk fails 'before fenced' though it fenced.",
        ("ledger-missed",),
        lambda h: hit(h) and fenced(h, "fb-1"),
        script=(Fault("error", actor="failback", phase="fence", op="list", site="primary", times=0),),
        pins={"heal_after": HEAL_AFTER_150_S},
        fixed="found by the simulator; fixed by #28: the walk reads this run's lease back when its fence step fails",
    ),
    Case(
        "rerun-after-failback",
        "The failover is killed proving parity; the failback completes; the re-run, 125 s later "
        "by hand, confirms against a lease it does not hold and fences a third epoch.",
        ("second-fence",),
        lambda h: hit(h) and fenced(h, "fb-1") and reran(h, "fo-1"),
        script=(Fault("crash", actor="fo-1#1", phase="prove", op="compute"),),
        pins={"failback_after": FAILBACK_AFTER_60_S, "rerun": RERUN_AFTER_125_S},
        fixed="found by the simulator; fixed by #28: seals name the run that took the epoch, a superseded re-run stands down",
    ),
    Case(
        "rerun-stands-down",
        "The failover is killed polling its job; the failback takes the lock; the re-run stands "
        "down, and its empty entry replaces the first attempt's: the fence and the job are forgotten.",
        ("ledger-missed", "ledger-checkpoint"),
        lambda h: hit(h) and fenced(h, "fo-1") and h.outcomes.get("fo-1") == "stood-down",
        script=(Fault("crash", actor="fo-1#1", phase="resume", op="compute", key="logs"),),
        pins={"rerun": RERUN_AFTER_125_S, "failback_after": FAILBACK_AFTER_60_S},
        fixed="#27 d4: a re-run's ledger entry replaces its first attempt's (found by the simulator)",
    ),
    Case(
        "rerun-ledger-unwritable",
        "The first attempt fenced and started the job, then was killed; one ledger write of the "
        "re-run fails: the run's last entry says it failed before fencing, and names a checkpoint "
        "the job never loaded.",
        ("ledger-missed", "ledger-checkpoint"),
        lambda h: hit(h) and fenced(h, "fo-1"),
        script=(
            Fault("crash", actor="fo-1#1", phase="prove", op="compute", key="status"),
            Fault("full", actor="fo-1#2", op="ledger"),
        ),
        fixed="#27 d4: a re-run's ledger entry replaces its first attempt's (found by the simulator)",
    ),
    Case(
        "calm",
        "No fault at all. The failover rolls back to step 10 (parity was not provable from 20); "
        "the old primary kept committing until the fence, sealed by time, so its later steps "
        "count: the failback resumes from one of them, a branch the job never continued.",
        ("fenced-out-copied", "active-overwritten", "certified-bad", "resumed-bad", "newest-deleted"),
        lambda h: fenced(h, "fo-1") and fenced(h, "fb-1"),
        fixed="#27 d3: epochs sealed by sequence, not clocks (found by the simulator)",
    ),
    # found by the simulator once #27 and the lock were in (#28), each fixed in the product
    Case(
        "pass-retried-across-the-fence",
        "A replication pass plans with the primary active; its copy fails listing the standby "
        "just before the fence and is retried 30 s later, after it: the retry must not trust the "
        "site state it planned with (nor its retention trim the store that is active now).",
        ("active-overwritten", "fenced-out-copied", "newest-deleted", "none-certifiable"),
        lambda h: hit(h) and fenced(h, "fo-1"),
        script=(
            Fault(
                "error",
                actor="replicator",
                op="list",
                site="secondary",
                key="/",
                phase="copy",
                after=50.0,
                until=52.0,
            ),
        ),
        pins={"outage": JOB_LOST, "failback": NO_FAILBACK},
        fixed="#28: Direction.guard reads the site state at every call; retention_for(planned=…)",
    ),
    Case(
        "chain-read-in-part",
        "Retention on another worker reads the ledger chain to learn what the failover resumes "
        "from; reading the chain's first record fails on both stores: a chain read in part "
        "must not pass for one with no failover in progress.",
        ("in-use-deleted",),
        lambda h: hit(h) and fenced(h, "fo-1"),
        script=(
            Fault(
                "error",
                actor="replicator",
                op="read",
                key="_lifeboat/chain/lb/000000000001.json",
                phase="retention",
                times=0,
            ),
        ),
        pins={
            "outage": JOB_LOST,
            "failback": NO_FAILBACK,
            "replicator_machine": 1,
            "ledger": CHAIN,
            "keep_last": KEEP_ONE,
        },
        fixed="#28: retention reads the ledger chain whole or deletes nothing",
    ),
    Case(
        "failback-after-early-resume",
        "The failover certified step 10 while the primary was cut off and resumed from it; the "
        "heal let its fence reach the primary, whose job had committed up to step 60 meanwhile. "
        "The failback must resume from the secondary's lineage, not from the old primary's "
        "steps 20-60: a branch the job never continued.",
        ("certified-bad", "resumed-bad"),
        lambda h: fenced(h, "fo-1") and fenced(h, "fb-1"),
        pins={
            "outage_at": 1,
            "heal_after": HEAL_AFTER_40_S,
            "failback_after": 2,  # 60 s: after the failover (and its proof) gave the lock back
            "replicators": 1,
            "replicator_machine": 1,
            "ledger": CHAIN,
        },
        fixed="#28: the fence seals the old epoch at the commit the run resumes from (basis 'resumed')",
    ),
    Case(
        "lock-taker-clock-ahead",
        "A second control plane whose clock runs 10 min ahead finds the first one's lock: a "
        "live holder's lease, whatever the taker's clock says.",
        ("two-acting", "second-fence", "self-fenced"),
        lambda h: "holds its lock" in h.notes.get("fo-2", {}).get("stood down", ""),
        pins={"second_control_plane": 1, "clock:cp-b": AHEAD, "failback": NO_FAILBACK},
        fixed="#28: the lock's lapse is judged by the store's clock alone",
    ),
    Case(
        "rerun-fails-before-resume",
        "Killed while its job starts, the failover is re-run; the re-run's check before its "
        "resume cannot read the site state (three tries): it fails, and must leave the job its "
        "first attempt started, the only one training.",
        ("torn-down", "restarted"),
        lambda h: hit(h) and reran(h, "fo-1"),
        script=(
            Fault("crash", actor="fo-1#1", phase="resume", op="compute", key="logs"),
            Fault("error", actor="fo-1#2", phase="resume", op="read", key="lease.json", times=0),
        ),
        fixed="#28: a re-run that fails before its own resume leaves the cluster its first attempt provisioned",
    ),
    Case(
        "rpo-clock-stepped",
        "The control plane's clock steps 10 min ahead (NTP) between the outage's stamp and the "
        "failover's first step (its lock took a timeout): the checkpoint looks written after the "
        "outage. The RPO is unknown (and says why), never 0.",
        ("ledger-negative-rpo",),
        lambda h: hit(h) and fenced(h, "fo-1") and resumed(h, "fo-1"),
        script=(Fault("timeout", actor="fo-1#1", op="head", key="lock.json"),),
        pins={"clock:cp-a": STEPPED_AHEAD, "failback": NO_FAILBACK},
        fixed="#28: skew read at confirmation; an RPO the clocks make negative is unknown",
    ),
    # what holds today, and must keep holding
    Case(
        "calm-failover",
        "No fault, no failback: the failover completes.",
        tuple(),
        lambda h: h.outcomes == {"fo-1": "completed"},
        pins={"failback": NO_FAILBACK},
    ),
    Case(
        "two-control-planes",
        "Two control planes (two automations on two workers) fail over at once: one takes the "
        "runbook's lock in the secondary store, the other stands down.",
        ("second-fence", "self-fenced", "restarted", "torn-down"),
        lambda h: sorted(h.outcomes.values()).count("stood-down") >= 1,
        pins={"second_control_plane": 1, "outage": PARTITION},
    ),
    Case(
        "zombie-true-clocks",
        "A partitioned zombie with true clocks never reaches the active site.",
        ("fenced-out-copied", "active-overwritten", "certified-bad", "resumed-bad"),
        lambda h: h.outcomes.get("fo-1") == "completed" and zombie_committed(h),
        pins={"outage": PARTITION, "failback": NO_FAILBACK},
    ),
)
RUNS: dict[str, History] = {}


def history(case: Case) -> History:
    if case.name not in RUNS:
        RUNS[case.name] = case.run()
    return RUNS[case.name]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_scripted_history_reaches_what_it_is_about(case):
    h = history(case)
    assert case.premise(h), f"{case.name}: {case.story}\n" + "\n".join(schedule_lines(h))


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=c.open_since)) if c.open_since else c
        for c in CASES
    ],
    ids=lambda c: c.name,
)
def test_no_scripted_history_violates_its_invariants(case):
    h = history(case)
    broken = [v for v in h.violations if not case.invariants or v.invariant in case.invariants]
    assert not broken, "\n".join([case.story, *(v.line() for v in broken), *schedule_lines(h)])
