"""The DR budget: what recovery readiness costs per month, as a share of GPU spend.

Three lines: checkpoint storage on the secondary under the retention policy, transfer of every
checkpoint across regions or providers, and standby GPU capacity by tier. A line whose inputs
are missing is listed as not counted rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HOURS_PER_MONTH = 730.0  # 8,760 h / 12

STANDBY_TIERS = ("cold", "warm", "hot")
# Share of the cluster's GPUs held on the secondary when the runbook does not say.
# Cold: nothing held, provision on demand. Warm: a slice reserved so the first nodes come
# up at once. Hot: a full running replica. Assumptions, to be replaced by your own.
DEFAULT_STANDBY_FRACTION = {"cold": 0.0, "warm": 0.10, "hot": 1.0}


@dataclass(frozen=True)
class ReferenceRange:
    """A DR spend band (share of GPU spend) quoted for an RTO band."""

    label: str
    rto_low_s: float
    rto_high_s: float
    share_low: float
    share_high: float

    def covers(self, rto_s: float) -> bool:
        return self.rto_low_s <= rto_s <= self.rto_high_s


# Reference points given in the issue that asked for this command; they are rules of thumb,
# not measurements, and nothing is inferred between them.
REFERENCE_RANGES = (
    ReferenceRange("RTO 30-60 min", 1800, 3600, 0.15, 0.20),
    ReferenceRange("RTO < 5 min", 0, 300, 0.35, 0.50),
)


@dataclass(frozen=True)
class BudgetLine:
    item: str
    usd_per_month: float
    basis: str  # the arithmetic, so a reader can redo it


@dataclass(frozen=True)
class DrBudget:
    gpu_spend_usd_per_month: float
    lines: tuple[BudgetLine, ...]
    not_counted: tuple[str, ...] = field(default=())  # "checkpoint storage (needs --checkpoint-size-gb)"
    rto_floor_s: float | None = None  # provisioning + restart; None without a provisioning time

    @property
    def total_usd_per_month(self) -> float:
        return sum(line.usd_per_month for line in self.lines)

    @property
    def share_of_gpu_spend(self) -> float:
        return self.total_usd_per_month / self.gpu_spend_usd_per_month

    @property
    def reference(self) -> ReferenceRange | None:
        """The reference band the RTO floor falls in, if any."""
        if self.rto_floor_s is None:
            return None
        return next((r for r in REFERENCE_RANGES if r.covers(self.rto_floor_s)), None)

    @property
    def verdict(self) -> str | None:
        """`below`, `within` or `above` the matching reference band; None without one."""
        ref = self.reference
        if ref is None:
            return None
        share = round(self.share_of_gpu_spend, 6)
        if share < ref.share_low:
            return "below"
        return "above" if share > ref.share_high else "within"


def dr_budget(
    *,
    gpus: int,
    gpu_hour_usd: float,
    checkpoint_period_s: float,
    checkpoint_size_gb: float | None,
    retained_checkpoints: int,
    storage_usd_per_gb_month: float | None,
    transfer_usd_per_gb: float | None,
    standby_tier: str,
    standby_fraction: float,
    standby_gpu_hour_usd: float,
    rto_floor_s: float | None,
) -> DrBudget:
    """Monthly DR spend; `checkpoint_period_s` is interval + write time (one checkpoint each)."""
    gpu_spend = gpus * gpu_hour_usd * HOURS_PER_MONTH
    lines: list[BudgetLine] = []
    missing: list[str] = []

    if checkpoint_size_gb is None or storage_usd_per_gb_month is None:
        missing.append("checkpoint storage (needs --checkpoint-size-gb and --storage-usd-per-gb-month)")
    else:
        usd = retained_checkpoints * checkpoint_size_gb * storage_usd_per_gb_month
        lines.append(
            BudgetLine(
                "checkpoint storage",
                usd,
                f"{retained_checkpoints} kept x {checkpoint_size_gb:,g} GB x ${storage_usd_per_gb_month:g}/GB-month",
            )
        )

    if checkpoint_size_gb is None or transfer_usd_per_gb is None:
        missing.append("transfer (needs --checkpoint-size-gb and --transfer-usd-per-gb)")
    else:
        per_month = HOURS_PER_MONTH * 3600 / checkpoint_period_s
        usd = per_month * checkpoint_size_gb * transfer_usd_per_gb
        lines.append(
            BudgetLine(
                "transfer",
                usd,
                f"{per_month:,.1f} checkpoints/month x {checkpoint_size_gb:,g} GB x ${transfer_usd_per_gb:g}/GB",
            )
        )

    standby_gpus = gpus * standby_fraction
    lines.append(
        BudgetLine(
            f"standby ({standby_tier})",
            standby_gpus * standby_gpu_hour_usd * HOURS_PER_MONTH,
            f"{standby_gpus:,g} GPUs x ${standby_gpu_hour_usd:g}/h x {HOURS_PER_MONTH:g} h",
        )
    )
    return DrBudget(gpu_spend, tuple(lines), tuple(missing), rto_floor_s)
