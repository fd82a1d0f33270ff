"""Which price catalog planning uses, and how old it is, decided without importing SkyPilot.

`live`: the user's SkyPilot setup: the clouds its last `sky check` enabled (read from its
state database, `~/.sky/state.db`, table `config`, keys `enabled_clouds_<workspace>_compute`)
and the catalogs it fetched (`~/.sky/catalogs/v8/<cloud>/vms.csv`; their mtime is the
fetch date). `snapshot`: the catalog shipped in `catalog/v8/` (no network, no credentials),
dated by `catalog/v8/SNAPSHOT`. The runbook's `plan.catalog` picks one; omitted, live when
`sky check` enabled a cloud, else the snapshot.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SNAPSHOT_DIR = Path(__file__).parent / "catalog" / "v8"


@dataclass(frozen=True)
class CatalogChoice:
    kind: str  # "live" or "snapshot"
    date: str  # the catalog's date (snapshot) or fetch date (live), ISO day; "" if never fetched
    clouds: tuple[str, ...]  # enabled clouds (live) or the clouds the snapshot covers
    why: str  # how the choice was made

    def describe(self) -> str:
        clouds = ", ".join(self.clouds) or "no cloud"
        if self.kind == "snapshot":
            return f"snapshot catalog of {self.date or 'unknown date'} shipped with Lifeboat ({clouds})"
        when = f"fetched {self.date}" if self.date else "not fetched yet"
        return f"live catalog ({clouds}; {when})"


def sky_home() -> Path:
    """The user's SkyPilot home (`LIFEBOAT_SKY_HOME` or `~`); never Lifeboat's offline dir."""
    return Path(os.environ.get("LIFEBOAT_SKY_HOME") or Path.home())


def enabled_clouds(home: Path | None = None) -> tuple[str, ...]:
    """The clouds the user's last `sky check` enabled for compute; () when it never ran."""
    db = (home or sky_home()) / ".sky" / "state.db"
    if not db.exists():
        return ()
    found: set[str] = set()
    with contextlib.suppress(sqlite3.Error, ValueError):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            rows = con.execute(
                "SELECT value FROM config WHERE key LIKE 'enabled_clouds_%' AND key LIKE '%compute'"
            ).fetchall()
        finally:
            con.close()
        for (value,) in rows:
            found.update(str(c).lower() for c in json.loads(value or "[]"))
    return tuple(sorted(found))


def snapshot_date() -> str:
    with contextlib.suppress(OSError):
        return (SNAPSHOT_DIR / "SNAPSHOT").read_text().strip()
    return ""


def live_catalog_date(home: Path | None = None) -> str:
    """Fetch day of the newest catalog SkyPilot downloaded for the user ("" when none)."""
    root = (home or sky_home()) / ".sky" / "catalogs" / "v8"
    stamps = [p.stat().st_mtime for p in root.glob("*/vms.csv")] if root.exists() else []
    return datetime.fromtimestamp(max(stamps), UTC).date().isoformat() if stamps else ""


def snapshot_clouds() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in SNAPSHOT_DIR.iterdir() if p.is_dir() and p.name != "common"))


def choose_catalog(setting: str | None, home: Path | None = None) -> CatalogChoice:
    """`setting` is the runbook's `plan.catalog` (or the CLI's): live, snapshot or None (auto)."""
    if setting == "snapshot":
        return CatalogChoice("snapshot", snapshot_date(), snapshot_clouds(), "plan.catalog: snapshot")
    clouds = enabled_clouds(home)
    if setting == "live":
        return CatalogChoice("live", live_catalog_date(home), clouds, "plan.catalog: live")
    if clouds:
        return CatalogChoice(
            "live", live_catalog_date(home), clouds, "sky check enabled " + ", ".join(clouds)
        )
    return CatalogChoice(
        "snapshot",
        snapshot_date(),
        snapshot_clouds(),
        "no cloud enabled by `sky check`: the shipped snapshot",
    )
