"""The stores' own clocks: what time a store says it is, and how far the control plane is off.

Lineage never depends on a clock (epochs are sealed by commit sequence, core/fencing.py), but
RPOs and seal times do, and the machines that write checkpoints and run failovers can be
minutes off. A store's clock is read from its answer to a small write: the object's
`updated` (S3 Last-Modified, to the second; GCS `updated`; a local file's mtime). The skew is
that time minus the control plane's own at the middle of the request; past `SKEW_WARN` it is
worth a line in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.base import Store

CLOCK_KEY = "_lifeboat/clock.json"  # the probe object a store's time is read from
SKEW_WARN = timedelta(seconds=30)  # a skew past this is recorded as a warning


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class StoreTime:
    """One reading of a store's clock against the control plane's."""

    uri: str
    at: datetime  # the store's time of the probe write
    skew: timedelta  # store time minus the control plane's (mid-request)

    @property
    def warn(self) -> bool:
        return abs(self.skew) > SKEW_WARN

    def describe(self) -> str:
        sign = "ahead of" if self.skew >= timedelta(0) else "behind"
        line = f"{self.uri} is {format_duration(abs(self.skew))} {sign} the control plane"
        return line + (f" (over {format_duration(SKEW_WARN)}: check NTP)" if self.warn else "")


def store_time(store: Store, clock: Callable[[], datetime] = _utcnow) -> StoreTime:
    """Read `store`'s clock by one small write (`CLOCK_KEY`). Raises `ProviderUnavailable`
    naming the store when it cannot be written (down, or full: ENOSPC)."""
    before = clock()
    try:
        info = store.put(CLOCK_KEY, before.isoformat().encode())
    except OSError as e:
        raise ProviderUnavailable(f"{store.uri}: cannot write {CLOCK_KEY}: {e.strerror or e}") from None
    after = clock()
    mid = before + (after - before) / 2
    return StoreTime(store.uri, info.updated, info.updated - mid)
