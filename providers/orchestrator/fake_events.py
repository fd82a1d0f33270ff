"""`FileEvents`: the event sink beside `PrefectEvents`, for tests and drills.

Each `emit` appends one JSON line `{"event", "resource", "payload", "id"}` to a file
(opened, written and closed per event: every rank of a job may append, none holds it), and
`read()` returns them in order. Emitting the same `id` twice stores it twice, unlike
Prefect: `read(unique=True)` keeps the first of each id, as Prefect's store would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FileEvents:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def emit(self, event: str, resource: dict[str, str], payload: dict[str, Any], *, id: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"event": event, "resource": resource, "payload": payload, "id": id})
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def read(self, *, unique: bool = False) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        events = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        if not unique:
            return events
        seen: set[str] = set()
        return [e for e in events if not (e["id"] in seen or seen.add(e["id"]))]
