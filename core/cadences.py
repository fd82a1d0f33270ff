"""How often a runbook's scheduled flows run, from its targets (`lifeboat deploy`, `lifeboat validate`).

Worst cases, every figure from the runbook:

RPO: replicate and certify. When the primary fails just before a checkpoint reaches the
secondary, the newest copy there is

    checkpoint.cadence + cluster.checkpoint_write + replicate period + cluster.replication

old (the write and the copy are 0 when the runbook gives no `cluster` numbers). So
`replicate` runs every RPO − cadence − write − copy, and `certify` at the same period: a
copy is certified (and a breach, `lifeboat.rpo.breached`, noticed) within one period of
landing. A realtime-inference runbook's RPO is 0 by immutable weights: no rule, the template's.

RTO: watch. An outage is confirmed one watch period after the quorum-th fastest of the
runbook's signals reads failing; each signal's own lag: `provider`, `gpu_health`,
`alertmanager` 0 (the alert rule's own `for:` is Alertmanager's), `training_progress`
`detection.stall_after`, `checkpoint_freshness` cadence × `freshness_factor`. Both vantages'
watches run at the period, so the second vantage's reading is in by then too. After the
confirmation: training, `failover.expected_ready` (approval to the first healthy step:
provision, load, resume); serving, the canary's latency budget and the hold of every switch
step but the last. So

    signal lag + watch period + after ≤ RTO

and `watch` runs every RTO − lag − after, at most `detection.window` (a reading votes that
long: a slower watch lets the two vantages' readings lapse apart). The approvers' answer is
not a cadence and is not counted: the approval card shows the expected RTO while they decide.

Loss log: `loss_log` (core/replication/losslog.py), only for a runbook whose
`verify.loss_log` lives in the primary store. A failover proves its checkpoint by the logged
steps after it (`verify.parity_min_coverage` × `parity_steps` of them); the log on the
secondary lags the primary's by up to one period, so an outage less than that period (plus
those steps) after a checkpoint finds too few and proves by replay (issue #34). It runs
`LOSS_LOG_PER_CHECKPOINT` times per checkpoint interval: cadence / 4, so about a quarter of
the interval at most goes unlogged on the secondary; each pass costs two small requests when
nothing changed (docs/parity.md has the measured trade).

Each derived period is at most the template's (`prefect.yaml`: a runbook that meets its
targets at the template's keeps it) and at least `MIN_PERIOD`; whole seconds. A period the
runbook sets (`cadences.watch`, `.replicate`, `.certify`, `.loss_log`) is taken as given. Either way,
`plan_cadences` says, one line per field with the figures, where a period cannot meet a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from lifeboat_dr.kernel.durations import format_duration as fd

MIN_PERIOD = timedelta(seconds=5)  # each run is a new process on a worker: a few seconds to start
FLOWS = ("watch", "replicate", "certify", "loss_log")
LOSS_LOG_PER_CHECKPOINT = 4  # loss-log passes per checkpoint interval


@dataclass(frozen=True)
class CadenceInputs:
    """The figures the rules read, from one runbook (`lifeboat_dr.flows.deploy.cadence_inputs`)."""

    rpo: timedelta
    rto: timedelta
    rpo_applies: bool  # False for realtime inference: immutable weights, RPO 0 by construction
    checkpoint_every: timedelta  # checkpoint.cadence
    checkpoint_write: timedelta  # cluster.checkpoint_write, else 0
    copy: timedelta  # cluster.replication, else 0
    lags: dict[str, timedelta]  # signal -> how long after the outage it reads failing
    quorum: int
    window: timedelta  # detection.window
    after: timedelta  # confirmation to the first healthy step (or all traffic on the standby)
    after_field: str  # the field `after` comes from, for the warnings
    overrides: dict[str, timedelta | None]  # cadences.<flow> as the runbook sets it
    loss_log: bool = False  # verify.loss_log lives in the primary store: `loss_log` ships it

    @property
    def confirm_lag(self) -> tuple[str, timedelta]:
        """The quorum-th fastest signal and its lag: the confirmation waits for it."""
        name, lag = sorted(self.lags.items(), key=lambda kv: (kv[1], kv[0]))[self.quorum - 1]
        return name, lag


@dataclass(frozen=True)
class Cadence:
    period: timedelta
    source: str  # "runbook" (cadences.<flow>), "derived" (from the targets) or "template"


@dataclass(frozen=True)
class CadencePlan:
    """The period of each scheduled flow, and why any of them cannot meet a target."""

    cadences: dict[str, Cadence]  # watch, replicate, certify, and loss_log when the runbook ships one
    warnings: tuple[str, ...]  # "field: figures", one line each

    def seconds(self, flow: str) -> int:
        return math.ceil(self.cadences[flow].period.total_seconds())

    def summary(self) -> str:
        return ", ".join(
            f"{flow} every {fd(c.period)}" + (" (runbook)" if c.source == "runbook" else "")
            for flow, c in self.cadences.items()
        )


def _whole_seconds(td: timedelta) -> timedelta:
    return timedelta(seconds=math.floor(td.total_seconds()))


def _pick(longest: timedelta | None, ceiling: timedelta) -> Cadence:
    """The longest period within the rule, the template's ceiling and MIN_PERIOD."""
    if longest is None:  # no rule applies
        return Cadence(ceiling, "template")
    period = max(MIN_PERIOD, _whole_seconds(min(longest, ceiling)))
    return Cadence(period, "template" if period == ceiling else "derived")


def plan_cadences(inp: CadenceInputs, ceilings: dict[str, timedelta]) -> CadencePlan:
    """Each flow's period (`ceilings`: the template's, per flow) and the warnings."""
    warnings: list[str] = []
    cadences: dict[str, Cadence] = {}

    # RPO: replicate (and certify at its period)
    fixed = inp.checkpoint_every + inp.checkpoint_write + inp.copy
    rpo_left = inp.rpo - fixed if inp.rpo_applies else None
    for flow in ("replicate", "certify"):
        given = inp.overrides[flow]
        cadences[flow] = Cadence(given, "runbook") if given else _pick(rpo_left, ceilings[flow])
    if inp.rpo_applies:
        parts = f"checkpoint every {fd(inp.checkpoint_every)}"
        if inp.checkpoint_write:
            parts += f" + write {fd(inp.checkpoint_write)}"
        if inp.copy:
            parts += f" + copy {fd(inp.copy)}"
        if rpo_left < MIN_PERIOD and not inp.overrides["replicate"]:
            field = "cluster.replication" if inp.copy > inp.checkpoint_every else "checkpoint.cadence"
            warnings.append(f"{field}: {parts}{_left(rpo_left, inp.rpo, 'RPO', 'replicate')}")
        for flow in ("replicate", "certify"):
            c = cadences[flow]
            if c.source == "runbook" and fixed + c.period > inp.rpo:
                what = {
                    "replicate": "the newest copy on the secondary may be",
                    "certify": "a replica over the RPO is noticed when its newest checkpoint is",
                }[flow]
                warnings.append(
                    f"cadences.{flow}: every {fd(c.period)}, {what} {fd(fixed + c.period)} old "
                    f"({parts} + {flow} every {fd(c.period)}): over the RPO target {fd(inp.rpo)} "
                    f"(every {fd(_whole_seconds(max(rpo_left, timedelta(0))))} at most)"
                )

    # RTO: watch
    signal, lag = inp.confirm_lag
    rto_left = inp.rto - lag - inp.after
    given = inp.overrides["watch"]
    cadences["watch"] = (
        Cadence(given, "runbook") if given else _pick(min(rto_left, inp.window), ceilings["watch"])
    )
    lag_part = f"{signal} after {fd(lag)}" if lag else f"{signal} at once"
    if rto_left < MIN_PERIOD and not given:
        field = inp.after_field if inp.after >= lag else _lag_field(signal)
        spent = f"confirmation ({lag_part}, quorum {inp.quorum}) + {inp.after_field} {fd(inp.after)}"
        warnings.append(f"{field}: {spent}{_left(rto_left, inp.rto, 'RTO', 'watch')}")
    elif given:
        total = lag + given + inp.after
        if total > inp.rto:
            warnings.append(
                f"cadences.watch: every {fd(given)}, an outage may be recovered from {fd(total)} after it "
                f"starts ({lag_part}, quorum {inp.quorum}, + one watch {fd(given)} + {inp.after_field} "
                f"{fd(inp.after)}): over the RTO target {fd(inp.rto)} (a watch every "
                f"{fd(_whole_seconds(rto_left))} at most)"
            )
        if given > inp.window:
            warnings.append(
                f"cadences.watch: every {fd(given)} is longer than detection.window {fd(inp.window)}: "
                "a reading stops voting before the next one, so the two vantages' readings may never agree"
            )
    # the loss log: a few times per checkpoint interval
    given = inp.overrides.get("loss_log")
    if inp.loss_log:
        rule = inp.checkpoint_every / LOSS_LOG_PER_CHECKPOINT
        cadences["loss_log"] = Cadence(given, "runbook") if given else _pick(rule, ceilings["loss_log"])
        if given and given >= inp.checkpoint_every:
            warnings.append(
                f"cadences.loss_log: every {fd(given)}, not more often than a checkpoint every "
                f"{fd(inp.checkpoint_every)}: a failover rarely finds logged steps after the newest "
                f"checkpoint and proves it by replay (every {fd(_whole_seconds(rule))} or less)"
            )
    elif given:
        warnings.append(
            "cadences.loss_log: set, but verify.loss_log is not in the primary store: there is no "
            "loss log to ship (the failover reads it where the runbook names it)"
        )
    return CadencePlan(cadences={f: cadences[f] for f in FLOWS if f in cadences}, warnings=tuple(warnings))


def _left(left: timedelta, target: timedelta, name: str, what: str) -> str:
    """The end of a "no period meets it" warning: how far over, or how little is left."""
    if left <= timedelta(0):
        return f" = {fd(target - left)}, over the {name} target {fd(target)} before any {what} period"
    return (
        f" leave {fd(left)} of the {name} target {fd(target)} for {what}, less than its shortest "
        f"period {fd(MIN_PERIOD)}"
    )


def _lag_field(signal: str) -> str:
    return {
        "training_progress": "detection.stall_after",
        "checkpoint_freshness": "checkpoint.freshness_factor",
    }.get(signal, "detection.quorum")
