"""Record a failover: Prefect table and markdown artifacts, and the timeline picture (drawn on
the worker and embedded in the markdown artifact, so the run's page shows it)."""

from __future__ import annotations

from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from lifeboat_dr.core.ledger import LedgerEntry
from lifeboat_dr.core.timeline import TIMELINES, entry_markdown, phase_rows, render_timeline, timeline_path


def publish(entry: LedgerEntry, folder: Path = TIMELINES) -> Path | None:
    """Attach the run's phases and verdict to the flow run; draw its Gantt chart into `folder`."""
    key = f"failover-{entry.runbook}"
    create_table_artifact(
        table=phase_rows(entry), key=f"{key}-phases", description=f"Phases of {entry.run_id}"
    )
    picture = None
    if entry.phases:
        picture = render_timeline(entry, timeline_path(entry, folder))
    text = entry_markdown(entry) + (_embedded(picture) if picture else "")
    create_markdown_artifact(markdown=text, key=key, description=f"RTO/RPO of {entry.runbook}")
    return picture


MAX_EMBEDDED = 2 * 1024 * 1024  # a Gantt PNG is ~40 KB; never inline something huge


def _embedded(picture: Path) -> str:
    """The picture inline (a data URI), so it shows on the run's Artifacts tab anywhere, plus
    where the worker keeps the file."""
    import base64

    data = picture.read_bytes()
    where = f"\nTimeline picture on the worker: `{picture}`\n"
    if len(data) > MAX_EMBEDDED:
        return where
    return f"\n![Failover timeline](data:image/png;base64,{base64.b64encode(data).decode()})\n" + where
