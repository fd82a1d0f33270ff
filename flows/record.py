"""Record a failover: Prefect table and markdown artifacts, and the timeline picture."""

from __future__ import annotations

from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from lifeboat.ledger import LedgerEntry
from lifeboat.timeline import TIMELINES, entry_markdown, phase_rows, render_timeline, timeline_path


def publish(entry: LedgerEntry, folder: Path = TIMELINES) -> Path | None:
    """Attach the run's phases and verdict to the flow run; draw its Gantt chart into `folder`."""
    key = f"failover-{entry.runbook}"
    create_table_artifact(
        table=phase_rows(entry), key=f"{key}-phases", description=f"Phases of {entry.run_id}"
    )
    picture = None
    if entry.phases:
        picture = render_timeline(entry, timeline_path(entry, folder))
    text = entry_markdown(entry) + (f"\nTimeline picture: `{picture}`\n" if picture else "")
    create_markdown_artifact(markdown=text, key=key, description=f"RTO/RPO of {entry.runbook}")
    return picture
