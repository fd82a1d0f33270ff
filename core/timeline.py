"""Ledger renderings: a Gantt PNG of one run, and markdown/table rows for Prefect artifacts.

Plain functions returning strings and lists of dicts; the flow passes them to
`create_markdown_artifact` / `create_table_artifact`. matplotlib is imported lazily (Agg),
so a worker that never draws never pays for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from lifeboat_dr.core.ledger import PHASES, RCA_THRESHOLD, LedgerEntry
from lifeboat_dr.core.serving.steps import steps_for
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.text import markdown_text

CLIENT_LABEL = "client-visible errors (synthetic client)"
START_UP_LABEL = "flow start-up (detection to the confirm step)"


def _fmt(td: timedelta | None) -> str:
    return format_duration(td) if td is not None else "—"


def _ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def _verdict(ratio: float | None) -> str:
    if ratio is None:
        return "not measured"
    if ratio > RCA_THRESHOLD:
        return "RCA required"
    return "met" if ratio <= 1 else "over target"


def _offset(entry: LedgerEntry, at: datetime | None) -> str:
    start = entry.phases.get("outage_start")
    if at is None:
        return "—"
    return f"+{format_duration(at - start)}" if start else at.isoformat(timespec="seconds")


def _order(entry: LedgerEntry) -> list[str]:
    """The entry's milestones in its step table's order, then any others the ledger knows."""
    own = ["outage_start", *(m for s in steps_for(entry.table) for m in (*s.marks, s.milestone))]
    return own + [p for p in PHASES if p not in own]


def phase_rows(entry: LedgerEntry) -> list[dict[str, str]]:
    """One row per milestone reached: for `create_table_artifact`."""
    rows = [
        {
            "phase": p,
            "at": entry.phases[p].isoformat(timespec="seconds"),
            "since outage": _offset(entry, entry.phases[p]),
        }
        for p in _order(entry)
        if p in entry.phases
    ]
    rows += [
        {
            "phase": f"FAILED before {f.phase}",
            "at": f.at.isoformat(timespec="seconds"),
            "since outage": f.error,
        }
        for f in entry.failures
    ]
    return rows


def history_rows(entries: list[LedgerEntry]) -> list[dict[str, str]]:
    """One row per run: the `lifeboat report` table and the history artifact."""
    return [
        {
            "run": e.run_id,
            "kind": e.label,
            "outage start": (
                e.phases["outage_start"].isoformat(timespec="seconds") if "outage_start" in e.phases else "—"
            ),
            "outcome": e.outcome,
            "RTO": _fmt(e.rto),
            "RTO/target": _ratio(e.rto_ratio),
            "RPO": _fmt(e.rpo),
            "RPO/target": _ratio(e.rpo_ratio),
            "resumed from": f"step {e.checkpoint_step}" if e.checkpoint_step is not None else "—",
            "parity": _parity(e),
            "RCA": "yes" if e.needs_rca else "no",
        }
        for e in entries
    ]


def _parity(e: LedgerEntry) -> str:
    """The proof in a table cell: outcome, coverage (compared of asked), how."""
    if e.parity is None:
        return "—"
    p = e.parity
    how = f", replay of step {p.replayed_from}" if p.replayed_from is not None else ""
    return f"{p.outcome} ({p.compared}/{p.asked}{how})"


MAX_NOTE = 2000  # characters of one note in the run's summary (the ledger keeps it whole)


def entry_markdown(entry: LedgerEntry) -> str:
    """The run's summary: targets, verdicts, milestones, failures, RCA reasons."""
    lines = [
        f"# {entry.label.capitalize()} `{entry.runbook}` — run `{entry.run_id}`: {entry.outcome}",
        "",
        "| | measured | target | ratio | verdict |",
        "|---|---|---|---|---|",
        f"| RTO | {_fmt(entry.rto)} | {_fmt(entry.rto_target)} | {_ratio(entry.rto_ratio)} | {_verdict(entry.rto_ratio)} |",
        f"| RPO | {_fmt(entry.rpo)} | {_fmt(entry.rpo_target)} | {_ratio(entry.rpo_ratio)} | {_verdict(entry.rpo_ratio)} |",
        "",
    ]
    if entry.start_up:
        start, stop = entry.start_up
        lines[6:6] = [f"| {START_UP_LABEL} | {_fmt(stop - start)} | — | — | part of the RTO |"]
    window = entry.client.window if entry.client else None
    if entry.client:
        ratio = window / entry.rto_target if window is not None and entry.rto_target else None
        lines[6:6] = [
            f"| client-visible error window | {_fmt(window)} | {_fmt(entry.rto_target)} | {_ratio(ratio)} | {_verdict(ratio)} |"
        ]
        lines += [
            f"Client: {entry.client.measured_by}: {entry.client.errors} of {entry.client.requests} requests failed.",
            "",
        ]
    if entry.checkpoint:
        lines += [f"Resumed from `{entry.checkpoint}`.", ""]
    if entry.parity is not None:
        lines += [f"Loss parity: {markdown_text(entry.parity.line(), MAX_NOTE)}.", ""]
    lines += ["| phase | at | since outage |", "|---|---|---|"]
    lines += [f"| {r['phase']} | {r['at']} | {r['since outage']} |" for r in phase_rows(entry)]
    if entry.notes:
        # notes carry text from outside (approvers, reasons, alert summaries): rendered as text
        lines += ["", *[f"- **{k}**: {markdown_text(v, MAX_NOTE)}" for k, v in sorted(entry.notes.items())]]
    if entry.needs_rca:
        lines += ["", "## Root-cause analysis required", "", *[f"- {r}" for r in entry.rca_reasons]]
    return "\n".join(lines) + "\n"


def history_markdown(entries: list[LedgerEntry]) -> str:
    rows = history_rows(entries)
    if not rows:
        return "No failovers or drills recorded yet.\n"
    head = list(rows[0])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]
    return "\n".join(out) + "\n"


TIMELINES = Path(".lifeboat/timelines")


def timeline_path(entry: LedgerEntry, folder: Path = TIMELINES) -> Path:
    """Where a run's timeline picture lives: the flow and `lifeboat report` agree on it."""
    return folder / f"{entry.runbook}-{entry.run_id}.png"


def origin_label(entry: LedgerEntry) -> str:
    """What the picture's time axis counts from: a failback begins when it is asked for."""
    return (
        "seconds since the failback was asked for"
        if entry.kind == "failback"
        else "seconds since outage start"
    )


def timeline_bars(entry: LedgerEntry) -> list[tuple[str, tuple[datetime, datetime]]]:
    """(label, (start, end)) of each bar the picture draws: the steps, the flow's start-up
    before the confirm step, the client's error window, each failed step up to its failure."""
    steps = steps_for(entry.table)
    bars = []
    for s in steps:
        if s.milestone == "confirmed" and entry.start_up:
            bars.append((START_UP_LABEL, entry.start_up))
        bars.append((s.label, entry.span(s.milestone)))
    bars = [(label, span) for label, span in bars if span]
    if entry.client and entry.client.first_error and entry.client.first_good_after:
        bars.append((CLIENT_LABEL, (entry.client.first_error, entry.client.first_good_after)))
    for f in entry.failures:  # the step that failed, up to the failure
        for s in steps:
            start = entry.began.get(s.milestone) or entry.start_of(s)
            if f.phase in (s.milestone, *s.marks) and start:
                bars.append((f"{s.label} (failed)", (start, f.at)))
    return bars


def render_timeline(entry: LedgerEntry, out: str | Path) -> Path:
    """Draw the run's steps as a Gantt chart (seconds since the outage) into a PNG."""
    import matplotlib.pyplot as plt

    fig = timeline_figure(entry)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def timeline_figure(entry: LedgerEntry):
    """The run's Gantt chart as a matplotlib figure, its title wrapped to fit the width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = entry.phases.get("outage_start") or min(entry.phases.values(), default=None)
    if origin is None:
        raise ValueError(f"run {entry.run_id} has no recorded phase to draw")
    bars = timeline_bars(entry)

    fig, ax = plt.subplots(figsize=(10, 0.45 * max(len(bars), 3) + 1.6), dpi=110)
    for row, (label, (start, stop)) in enumerate(bars):
        left = (start - origin).total_seconds()
        width = max((stop - start).total_seconds(), 0.0)
        color = "#d62728" if label.endswith("(failed)") else ("#ff7f0e" if label == "approval" else "#1f77b4")
        color = "#9467bd" if label == CLIENT_LABEL else "#7f7f7f" if label == START_UP_LABEL else color
        ax.barh(row, width or 0.001, left=left, color=color, height=0.6)
        ax.text(left + width, row, f" {format_duration(stop - start)}", va="center", fontsize=8)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    ax.set_xlabel(origin_label(entry))
    # Scale to what happened; a target far beyond it would squash every bar to a sliver.
    end = max(
        [(stop - origin).total_seconds() for _, (_, stop) in bars]
        + [entry.rto.total_seconds() if entry.rto else 0]
    )
    target = entry.rto_target.total_seconds()
    ax.set_xlim(0, max(end, target if target <= 2 * end else 0) * 1.08 or 1)
    for name, value, style in (("RTO target", entry.rto_target, "--"), ("RTO", entry.rto, "-")):
        if value is not None and value.total_seconds() <= ax.get_xlim()[1]:
            ax.axvline(value.total_seconds(), color="#2ca02c" if name == "RTO" else "#7f7f7f", ls=style, lw=1)
            ax.annotate(
                name,
                (value.total_seconds(), 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                ha="center",
                va="bottom",
            )
    client = f", client errors {_fmt(entry.client.window)}" if entry.client else ""
    parts = [
        f"{entry.runbook} {entry.label} {entry.run_id} ({entry.outcome}):",
        f"RTO {_fmt(entry.rto)} (target {_fmt(entry.rto_target)}),",
        f"RPO {_fmt(entry.rpo)} (target {_fmt(entry.rpo_target)}){client}",
    ]
    title = ax.set_title(" ".join(parts), fontsize=9, pad=14)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _fit_title(fig, title, parts)
    return fig


def _fit_title(fig, title, parts: list[str]) -> None:
    """Wrap the title at its parts until it lies inside the figure (measured as drawn: it is
    centred over the axes, a run id is 36 characters, a runbook name up to 63), then shrink
    what still does not."""
    renderer = fig.canvas.get_renderer()
    for lines in ([" ".join(parts)], [parts[0], " ".join(parts[1:])], parts):
        title.set_text("\n".join(lines))
        if overflow(fig, title, renderer) <= 0:
            break
    while overflow(fig, title, renderer) > 0 and title.get_fontsize() > 5:
        title.set_fontsize(title.get_fontsize() - 0.5)
    fig.tight_layout()


def overflow(fig, text, renderer=None) -> float:
    """Pixels of `text` outside the figure's width (0 or less: it fits)."""
    box = text.get_window_extent(renderer or fig.canvas.get_renderer())
    return max(-box.x0, box.x1 - fig.bbox.width)
