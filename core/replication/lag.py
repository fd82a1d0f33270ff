"""The lag replication runs at: how far behind the primary each replica completed.

A replica's lag is its completion time minus the source checkpoint's write time. A lag over
the RPO target means a failover right now would lose more than the target allows; the
`replicate` flow turns such records into `lifeboat.replication.lag_exceeded` events
(`LAG_EVENT`). A checkpoint that failed to replicate is reported with its lag so far (still
growing). Lag records are JSON lines (`LagLog`), one per replica completed, newest last.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from lifeboat_dr.kernel.errors import WriteFailed

LAG_EVENT = "lifeboat.replication.lag_exceeded"


@dataclass(frozen=True)
class LagRecord:
    """How far behind the primary one checkpoint's replica completed (or still is)."""

    checkpoint: str  # prefix, the same on both stores
    step: int
    source_written: datetime  # newest write among the checkpoint's objects on the primary
    replicated: datetime  # when its commit marker landed on the secondary, or now if not yet
    rpo_target: timedelta
    complete: bool = True  # False: replication failed; the lag is as of `replicated`

    @property
    def lag(self) -> timedelta:
        return max(timedelta(0), self.replicated - self.source_written)

    @property
    def exceeded(self) -> bool:
        return self.lag > self.rpo_target

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "step": self.step,
            "source_written": self.source_written.isoformat(),
            "replicated": self.replicated.isoformat(),
            "lag_seconds": round(self.lag.total_seconds(), 3),
            "rpo_target_seconds": self.rpo_target.total_seconds(),
            "exceeded": self.exceeded,
            "complete": self.complete,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> LagRecord:
        return cls(
            checkpoint=doc["checkpoint"],
            step=int(doc["step"]),
            source_written=datetime.fromisoformat(doc["source_written"]),
            replicated=datetime.fromisoformat(doc["replicated"]),
            rpo_target=timedelta(seconds=float(doc["rpo_target_seconds"])),
            complete=bool(doc.get("complete", True)),
        )


class LagLog:
    """Lag records as JSON lines in a local file (appended; one writer per runbook)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, records: Iterable[LagRecord]) -> None:
        """Append; an unwritable folder or a full disk is a one-line `WriteFailed`."""
        lines = [json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in records]
        if lines:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as f:
                    f.writelines(lines)
            except OSError as e:
                raise WriteFailed(f"cannot write the lag log {self.path}: {e.strerror or e}") from None

    def read(self) -> list[LagRecord]:
        if not self.path.exists():
            return []
        return [LagRecord.from_dict(json.loads(line)) for line in self.path.read_text().splitlines() if line]


def default_lag_log(runbook: str) -> Path:
    """`.lifeboat/<runbook name>/replication-lag.jsonl` under the working directory."""
    return Path(".lifeboat") / runbook / "replication-lag.jsonl"
