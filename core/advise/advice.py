"""`advise(inputs)`: the advised checkpoint interval, what each interval costs, the DR budget."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from lifeboat_dr.core.advise import interval as iv
from lifeboat_dr.core.advise.budget import HOURS_PER_MONTH, DrBudget, dr_budget
from lifeboat_dr.core.advise.inputs import AdviceInputs


@dataclass(frozen=True)
class IntervalOutcome:
    """What checkpointing every `interval_s` of compute costs, on average."""

    label: str
    interval_s: float
    waste_fraction: float  # checkpoint writes + restarts + rework, share of wall time
    waste_usd_per_month: float  # that share of a month of GPU spend
    rework_s: float  # work redone after one failure
    loss_per_failure_s: float  # rework + restart
    loss_per_failure_gpu_hours: float
    loss_per_failure_usd: float
    expected_rpo_s: float
    worst_rpo_s: float


@dataclass(frozen=True)
class Advice:
    inputs: AdviceInputs
    young_interval_s: float
    daly_interval_s: float
    failures_per_month: float
    advised: IntervalOutcome  # at Daly's interval
    current: IntervalOutcome | None  # at the runbook's cadence (or --interval)
    budget: DrBudget
    # When Daly's worst RPO misses the target: the least-waste interval that meets it (the
    # longest, as waste only grows below Daly's), or None if even C + replication exceed it.
    meets_rpo: IntervalOutcome | None = None
    rpo_unreachable: bool = False  # a target no interval can meet

    @property
    def recommended(self) -> IntervalOutcome:
        """What to checkpoint at: Daly's interval, or the least-waste one meeting the RPO target."""
        return self.meets_rpo or self.advised

    def to_dict(self) -> dict:
        """Plain JSON-ready data; budget properties are spelled out."""
        out = asdict(self)
        b = self.budget
        ref = b.reference
        out["budget"].update(
            total_usd_per_month=b.total_usd_per_month,
            share_of_gpu_spend=b.share_of_gpu_spend,
            reference=asdict(ref) if ref else None,
            verdict=b.verdict,
        )
        return out


def outcome(label: str, interval_s: float, inp: AdviceInputs) -> IntervalOutcome:
    c, r, m = inp.checkpoint_write_s, inp.restart_s, inp.mtbf_s
    waste = iv.expected_waste_fraction(interval_s, c, r, m)
    rework = iv.expected_rework_s(interval_s, c)
    loss_s = rework + r
    return IntervalOutcome(
        label=label,
        interval_s=interval_s,
        waste_fraction=waste,
        waste_usd_per_month=waste * iv.gpu_cost_usd(inp.gpus, HOURS_PER_MONTH, inp.gpu_hour_usd),
        rework_s=rework,
        loss_per_failure_s=loss_s,
        loss_per_failure_gpu_hours=iv.gpu_hours(inp.gpus, loss_s / 3600),
        loss_per_failure_usd=iv.gpu_cost_usd(inp.gpus, loss_s / 3600, inp.gpu_hour_usd),
        expected_rpo_s=iv.expected_rpo_s(interval_s, c, inp.replication_s),
        worst_rpo_s=iv.worst_rpo_s(interval_s, c, inp.replication_s),
    )


def advise(inp: AdviceInputs) -> Advice:
    daly = iv.daly_interval_s(inp.checkpoint_write_s, inp.mtbf_s)
    advised = outcome("advised (Daly)", daly, inp)
    current = (
        outcome("current cadence", inp.current_interval_s, inp)
        if inp.current_interval_s is not None
        else None
    )
    # The budget prices what the job does now; without a cadence, what it would do if advised.
    period_s = (current or advised).interval_s + inp.checkpoint_write_s
    rto_floor = inp.provision_s + inp.restart_s if inp.provision_s is not None else None
    budget = dr_budget(
        gpus=inp.gpus,
        gpu_hour_usd=inp.gpu_hour_usd,
        checkpoint_period_s=period_s,
        checkpoint_size_gb=inp.checkpoint_size_gb,
        retained_checkpoints=inp.retained_checkpoints,
        storage_usd_per_gb_month=inp.storage_usd_per_gb_month,
        transfer_usd_per_gb=inp.transfer_usd_per_gb,
        standby_tier=inp.standby_tier,
        standby_fraction=inp.standby_fraction,
        standby_gpu_hour_usd=inp.standby_gpu_hour_usd
        if inp.standby_gpu_hour_usd is not None
        else inp.gpu_hour_usd,
        rto_floor_s=rto_floor,
    )
    meets_rpo, unreachable = None, False
    target = inp.rpo_target_s
    if target is not None and advised.worst_rpo_s > target:
        longest = iv.longest_interval_within_rpo_s(target, inp.checkpoint_write_s, inp.replication_s)
        if longest is None:
            unreachable = True
        else:
            meets_rpo = outcome("advised (meets RPO)", longest, inp)
            advised = replace(advised, label="Daly (misses RPO)")
    return Advice(
        meets_rpo=meets_rpo,
        rpo_unreachable=unreachable,
        inputs=inp,
        young_interval_s=iv.young_interval_s(inp.checkpoint_write_s, inp.mtbf_s),
        daly_interval_s=daly,
        failures_per_month=HOURS_PER_MONTH * 3600 / inp.mtbf_s,
        advised=advised,
        current=current,
        budget=budget,
    )
