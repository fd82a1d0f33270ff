"""Advice as text (the CLI), Markdown (`lifeboat render`) and JSON-ready data.

Text and Markdown are built from the same rows, so the two never disagree.
"""

from __future__ import annotations

from datetime import timedelta

from lifeboat_dr.core.advise.advice import Advice, IntervalOutcome, advise
from lifeboat_dr.core.advise.budget import HOURS_PER_MONTH, REFERENCE_RANGES
from lifeboat_dr.core.advise.inputs import RunbookFigures, resolve_inputs
from lifeboat_dr.kernel.durations import format_duration

TITLE = "Checkpoint interval and DR budget"


def dur(seconds: float) -> str:
    """A duration to the minute from 10 minutes up, to the second below."""
    step = 60 if seconds >= 600 else 1
    return format_duration(timedelta(seconds=round(seconds / step) * step))


def usd(x: float) -> str:
    return f"${x:,.2f}"


def pct(x: float) -> str:
    return f"{x:.1%}"


def _band(low: float, high: float) -> str:
    return f"{low * 100:g}-{high * 100:g}%"


INTERVAL_HEADER = (
    "", "interval", "waste", "waste $/month", "rework", "loss/failure", "GPU-h/failure", "$/failure",
    "expected RPO", "worst RPO",
)  # fmt: skip


def _interval_row(o: IntervalOutcome) -> tuple[str, ...]:
    return (
        o.label, dur(o.interval_s), pct(o.waste_fraction), usd(o.waste_usd_per_month), dur(o.rework_s),
        dur(o.loss_per_failure_s), f"{o.loss_per_failure_gpu_hours:,.1f}", usd(o.loss_per_failure_usd),
        dur(o.expected_rpo_s), dur(o.worst_rpo_s),
    )  # fmt: skip


def _summary(a: Advice) -> list[str]:
    i = a.inputs
    hours = f"{i.mtbf_s / 3600:,.1f}".removesuffix(".0") + "h"
    mtbf = f"cluster MTBF {hours if i.mtbf_s >= 86400 else dur(i.mtbf_s)}"
    if i.gpu_mtbf_s is not None:
        mtbf += f" (GPU MTBF {i.gpu_mtbf_s / 3600:,.0f}h / {i.gpus:,} GPUs)"
    return [
        f"{i.gpus:,} GPUs at {usd(i.gpu_hour_usd)}/GPU-hour; {mtbf}, {a.failures_per_month:,.1f} failures/month",
        f"checkpoint write C {dur(i.checkpoint_write_s)}; restart R {dur(i.restart_s)}"
        + (f"; replication {dur(i.replication_s)}" if i.replication_s else "")
        + "; loss/failure = rework (T+C)/2 + R",
        f"Young sqrt(2CM) {dur(a.young_interval_s)}; Daly {dur(a.daly_interval_s)} "
        + (
            f"misses the RPO target: advised {dur(a.meets_rpo.interval_s)}, the least waste that meets it"
            if a.meets_rpo
            else "(advised)"
        ),
    ]


def _outcomes(a: Advice) -> list[IntervalOutcome]:
    return [o for o in (a.advised, a.meets_rpo, a.current) if o is not None]


def _saving(a: Advice) -> str | None:
    best = a.recommended
    if a.current is None or a.current.waste_fraction <= best.waste_fraction:
        return None
    points = (a.current.waste_fraction - best.waste_fraction) * 100
    dollars = a.current.waste_usd_per_month - best.waste_usd_per_month
    return f"the advised interval wastes {points:.1f} points less: {usd(dollars)}/month"


def _rpo_check(a: Advice) -> str | None:
    target = a.inputs.rpo_target_s
    if target is None:
        return None
    parts = [
        f"{o.label} worst {dur(o.worst_rpo_s)} {'meets it' if o.worst_rpo_s <= target else 'MISSES it'}"
        for o in (a.advised, a.current)
        if o is not None
    ]
    line = f"RPO target {dur(target)}: " + "; ".join(parts)
    if a.rpo_unreachable:
        return line + "; no interval meets it (checkpoint write + replication alone exceed it)"
    m = a.meets_rpo
    if m is not None:
        points = (m.waste_fraction - a.advised.waste_fraction) * 100
        dollars = m.waste_usd_per_month - a.advised.waste_usd_per_month
        line += (
            f"; meeting it (every {dur(m.interval_s)}) costs {points:.1f} points more waste "
            f"than Daly: {usd(dollars)}/month"
        )
    return line


def _budget_rows(a: Advice) -> list[tuple[str, str, str, str]]:
    b = a.budget
    rows = [(line.item, usd(line.usd_per_month), pct(line.usd_per_month / b.gpu_spend_usd_per_month), line.basis)
            for line in b.lines]  # fmt: skip
    rows.append(("total", usd(b.total_usd_per_month), pct(b.share_of_gpu_spend), ""))
    return rows


def _budget_notes(a: Advice) -> list[str]:
    b, i = a.budget, a.inputs
    notes = [f"not counted: {m}" for m in b.not_counted]
    refs = "; ".join(f"{r.label}: {_band(r.share_low, r.share_high)} of GPU spend" for r in REFERENCE_RANGES)
    notes.append(f"reference ranges: {refs}")
    if b.rto_floor_s is None:
        notes.append("RTO floor unknown: give --provision to place this tier against a reference range")
        return notes
    floor = f"RTO floor {dur(b.rto_floor_s)} (provision {dur(i.provision_s)} + restart {dur(i.restart_s)})"
    if i.rto_target_s is not None:
        floor += (
            f"; RTO target {dur(i.rto_target_s)} {'met' if b.rto_floor_s <= i.rto_target_s else 'NOT met'}"
        )
    notes.append(floor)
    ref = b.reference
    if ref is None:
        notes.append(f"the RTO floor ({dur(b.rto_floor_s)}) is in neither reference band: no comparison")
    else:
        notes.append(
            f"{pct(b.share_of_gpu_spend)} is {b.verdict} the {ref.label} band "
            f"({_band(ref.share_low, ref.share_high)})"
        )
    return notes


def _table(rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> list[str]:
    """Plain-text columns: those in `left` left-aligned, the rest (numbers) right-aligned."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [
            cell.ljust(w) if c in left else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def format_text(a: Advice) -> str:
    lines = [TITLE + (f": {a.inputs.name}" if a.inputs.name else "")]
    lines += ["  " + s for s in _summary(a)]
    lines += ["", "Interval"]
    rows = [INTERVAL_HEADER] + [_interval_row(o) for o in _outcomes(a)]
    lines += _table(rows)
    lines += ["  " + s for s in (_saving(a), _rpo_check(a)) if s]
    b = a.budget
    lines += ["", f"DR budget per month ({HOURS_PER_MONTH:g} h): GPU spend {usd(b.gpu_spend_usd_per_month)}"]
    lines += _table(_budget_rows(a), left=(0, 3))
    lines += ["  " + n for n in _budget_notes(a)]
    return "\n".join(lines) + "\n"


def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def format_markdown(a: Advice, heading: str = "##") -> str:
    lines = [f"{heading} {TITLE}", ""]
    lines += [s + "  " for s in _summary(a)[:-1]] + [_summary(a)[-1] + ".", ""]
    rows = [_interval_row(o) for o in _outcomes(a)]
    lines += _md_table(("interval choice",) + INTERVAL_HEADER[1:], rows)
    lines += [""] + [f"- {s[0].upper()}{s[1:]}." for s in (_saving(a), _rpo_check(a)) if s]
    b = a.budget
    lines += [
        "",
        f"DR budget per month ({HOURS_PER_MONTH:g} h of GPU spend = {usd(b.gpu_spend_usd_per_month)}):",
        "",
    ]
    lines += _md_table(("item", "$/month", "share of GPU spend", "basis"), _budget_rows(a))
    lines += [""] + [f"- {n}" for n in _budget_notes(a)]
    return "\n".join(lines) + "\n"


def advice_markdown(figures: RunbookFigures) -> str | None:
    """The render section for a runbook; None when it has no `cluster:` section."""
    if figures.cluster is None:
        return None
    return format_markdown(advise(resolve_inputs(figures)))
