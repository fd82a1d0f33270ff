"""What `advise` works from: the runbook's `cluster:` section, overridden by flags.

`resolve_inputs` turns both into one `AdviceInputs` in plain units (seconds, dollars, GB) and
says, in one line, everything that is missing or impossible. What it reads of a runbook
arrives as `RunbookFigures` (`lifeboat_dr.flows.wiring.advice_figures` reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lifeboat_dr.core.advise.budget import DEFAULT_STANDBY_FRACTION, STANDBY_TIERS
from lifeboat_dr.core.advise.interval import cluster_mtbf_s
from lifeboat_dr.kernel.errors import ConfigError

if TYPE_CHECKING:
    from lifeboat_dr.runbooks.model import Cluster

# Input name -> (flag, what it is, with its unit). The CLI help and the error messages use it.
INPUTS: dict[str, tuple[str, str]] = {
    "gpus": ("--gpus", "GPUs the job runs on (count)"),
    "gpu_hour_usd": ("--gpu-hour-usd", "price of one GPU-hour (US dollars)"),
    "mtbf": ("--mtbf", "cluster mean time between job-stopping failures (duration: 8h, 5d)"),
    "gpu_mtbf": (
        "--gpu-mtbf",
        "one GPU's mean time between failures (duration: 50000h); cluster = this / GPUs",
    ),
    "checkpoint_write": (
        "--checkpoint-write",
        "time the job is blocked writing one checkpoint, C (duration: 90s)",
    ),
    "restart": ("--restart", "failure to training again: reschedule, load, warm up, R (duration: 10m)"),
    "interval": (
        "--interval",
        "current compute time between checkpoints (duration); default checkpoint.cadence",
    ),
    "checkpoint_size_gb": ("--checkpoint-size-gb", "size of one checkpoint (GB, 10^9 bytes)"),
    "keep_last": (
        "--keep-last",
        "checkpoints kept on the secondary (count); default checkpoint.retention.keep_last",
    ),
    "storage_usd_per_gb_month": (
        "--storage-usd-per-gb-month",
        "secondary storage price (US dollars per GB-month)",
    ),
    "transfer_usd_per_gb": (
        "--transfer-usd-per-gb",
        "cross-region/provider transfer price (US dollars per GB)",
    ),
    "replication": ("--replication", "time to copy one checkpoint to the secondary; adds to RPO (duration)"),
    "standby": (
        "--standby",
        "standby tier: cold (provision on demand), warm (a slice reserved), hot (running replica)",
    ),
    "standby_fraction": (
        "--standby-fraction",
        "share of the cluster's GPUs held on standby (0-1; default cold 0, warm 0.1, hot 1)",
    ),
    "standby_gpu_hour_usd": (
        "--standby-gpu-hour-usd",
        "price of one standby GPU-hour (US dollars); default --gpu-hour-usd",
    ),
    "provision": (
        "--provision",
        "time to get GPUs running on the secondary at this tier (duration); gives the RTO floor",
    ),
}
REQUIRED = ("gpus", "gpu_hour_usd", "checkpoint_write")


@dataclass(frozen=True)
class RunbookFigures:
    """What advise reads from a runbook: its name, targets, checkpoint cadence and retention,
    and its `cluster:` section."""

    name: str
    rpo_target: timedelta
    rto_target: timedelta
    interval: timedelta  # checkpoint.cadence: the interval the job checkpoints at now
    keep_last: int  # checkpoint.retention.keep_last
    cluster: Cluster | None  # the runbook's own section; None: every cluster figure from flags


@dataclass(frozen=True)
class AdviceInputs:
    """Everything the maths needs, in plain units."""

    gpus: int
    gpu_hour_usd: float
    mtbf_s: float  # the cluster's
    checkpoint_write_s: float
    restart_s: float = 0.0
    gpu_mtbf_s: float | None = None  # set when the cluster MTBF was derived from it
    current_interval_s: float | None = None
    checkpoint_size_gb: float | None = None
    retained_checkpoints: int = 3
    storage_usd_per_gb_month: float | None = None
    transfer_usd_per_gb: float | None = None
    replication_s: float = 0.0
    standby_tier: str = "cold"
    standby_fraction: float = 0.0
    standby_gpu_hour_usd: float | None = None  # None: same as gpu_hour_usd
    provision_s: float | None = None
    rpo_target_s: float | None = None
    rto_target_s: float | None = None
    name: str | None = None


def _seconds(v: Any) -> float | None:
    if v is None:
        return None
    return v.total_seconds() if isinstance(v, timedelta) else float(v)


def resolve_inputs(figures: RunbookFigures | None, overrides: dict[str, Any] | None = None) -> AdviceInputs:
    """Runbook values first, then every override that is not None (flags win).

    Durations may be `timedelta` or seconds. Raises `ConfigError` naming each missing input
    with its flag, or the first impossible value.
    """
    values: dict[str, Any] = {}
    if figures is not None:
        values["interval"] = figures.interval
        values["keep_last"] = figures.keep_last
        if figures.cluster is not None:
            cluster = figures.cluster  # attributes, not model_dump: that would spell durations as text
            values.update(
                {
                    k: getattr(cluster, k)
                    for k in type(cluster).model_fields
                    if getattr(cluster, k) is not None
                }
            )
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "mtbf" in given and "gpu_mtbf" in given:
        raise ConfigError("give --mtbf (cluster) or --gpu-mtbf (per GPU), not both")
    for one, other in (("mtbf", "gpu_mtbf"), ("gpu_mtbf", "mtbf")):
        if one in given:  # a flag for one form of the failure rate replaces the runbook's other form
            values.pop(other, None)
    values.update(given)

    missing = [k for k in REQUIRED if k not in values]
    if "mtbf" not in values and "gpu_mtbf" not in values:
        missing.append("mtbf")
    if missing:
        names = ", ".join(f"{INPUTS[k][0]} ({INPUTS[k][1]})" for k in missing)
        where = "in the runbook's cluster: section or as flags" if figures is not None else "as flags"
        raise ConfigError(f"missing {names}; give them {where}")

    gpus = int(values["gpus"])
    gpu_mtbf_s = _seconds(values.get("gpu_mtbf"))
    mtbf_s = _seconds(values["mtbf"]) if "mtbf" in values else None
    tier = str(values.get("standby", "cold"))
    fraction = values.get("standby_fraction")
    checks = [
        (gpus >= 1, "--gpus must be at least 1"),
        (float(values["gpu_hour_usd"]) > 0, "--gpu-hour-usd must be more than 0"),
        ((mtbf_s or gpu_mtbf_s or 0) > 0, "the MTBF must be more than 0"),
        (
            _seconds(values["checkpoint_write"]) > 0,
            "--checkpoint-write must be more than 0 (C = 0 means no interval is optimal)",
        ),
        (tier in STANDBY_TIERS, f"--standby must be one of {', '.join(STANDBY_TIERS)}"),
        (fraction is None or float(fraction) >= 0, "--standby-fraction cannot be negative"),
        (int(values.get("keep_last", 3)) >= 1, "--keep-last must be at least 1"),
        ((_seconds(values.get("interval")) or 1) > 0, "--interval must be more than 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    if mtbf_s is None:
        mtbf_s = cluster_mtbf_s(gpu_mtbf_s, gpus)

    def opt_float(key: str) -> float | None:
        return None if values.get(key) is None else float(values[key])

    return AdviceInputs(
        gpus=gpus,
        gpu_hour_usd=float(values["gpu_hour_usd"]),
        mtbf_s=mtbf_s,
        checkpoint_write_s=_seconds(values["checkpoint_write"]),
        restart_s=_seconds(values.get("restart")) or 0.0,
        gpu_mtbf_s=gpu_mtbf_s,
        current_interval_s=_seconds(values.get("interval")),
        checkpoint_size_gb=opt_float("checkpoint_size_gb"),
        retained_checkpoints=int(values.get("keep_last", 3)),
        storage_usd_per_gb_month=opt_float("storage_usd_per_gb_month"),
        transfer_usd_per_gb=opt_float("transfer_usd_per_gb"),
        replication_s=_seconds(values.get("replication")) or 0.0,
        standby_tier=tier,
        standby_fraction=DEFAULT_STANDBY_FRACTION[tier] if fraction is None else float(fraction),
        standby_gpu_hour_usd=opt_float("standby_gpu_hour_usd"),
        provision_s=_seconds(values.get("provision")),
        rpo_target_s=_seconds(figures.rpo_target) if figures is not None else None,
        rto_target_s=_seconds(figures.rto_target) if figures is not None else None,
        name=figures.name if figures is not None else None,
    )
