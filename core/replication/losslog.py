"""The pre-failure loss log's own pass: that one object, primary to secondary, more often
than checkpoints (issue #34), so a failover usually finds logged steps after the newest
checkpoint and proves it without a replay.

One pass (`ship_loss_log`):

- **only when it changed**: a HEAD of the primary's log and a GET of the record of the last
  copy (`<key>.shipped` beside the copy on the secondary: the primary's size and version then,
  and the byte range copied). The same size and version: nothing is read or written (2 requests).
- **bounded**: the copy is the primary's last `max_bytes` at most, one ranged read. While
  the log is smaller it is the whole log; past that, its newest lines (a tail: the proof reads
  the steps after the previous certified checkpoint, a few intervals, never the whole run).
  At most `max_bytes` read and written a pass, whatever the log's length.
- **whole lines only**: the copy ends at the primary's last newline (a line the trainer is
  still writing waits for the next pass) and, when it is a tail, starts just after a newline
  (the byte before the window is read to tell). So the secondary's copy is always a valid JSON
  lines document: the primary's log up to a line end, less (past `max_bytes`) its oldest lines
  — never a torn line, never two lines run together, whatever moment the primary was cut at.
- **by the site state**: `guard()` runs after the read and before any write (the loss log
  travels from the primary only, while it is the active site: `primary_is_active`), so a
  fenced-out primary's log never lands over the active site's copy, and an unknown site state
  (`SiteStateUnknown`) writes nothing.

The log is append-only (the trainer appends a line a step); one rewritten shorter (a new
run) is copied afresh, as its size is then below the one recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lifeboat_dr.core.sitestate import read_site_state, require_active
from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.base import Store

SHIPPED_SUFFIX = ".shipped"  # the record of the last copy, beside it on the secondary
# ~10k lines of {"step", "loss"}: the proof reads a few checkpoint intervals of steps
DEFAULT_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class LossLogPass:
    """What one pass did with the loss log."""

    key: str
    copied_bytes: int = 0  # written to the secondary's copy (0: nothing new)
    requests: int = 0  # store requests the pass made (site-state reads by `guard` not counted)
    through: int | None = None  # the primary's offset the copy ends at (a line end)
    tail: bool = False  # the copy starts after the primary's first byte (the log outgrew max_bytes)
    unchanged: str | None = None  # why nothing was written: one line


def ship_loss_log(
    primary: Store,
    secondary: Store,
    key: str,
    *,
    guard: Callable[[], None] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> LossLogPass:
    """Copy the primary's loss log `key` to the same key on the secondary when it changed:
    its newest whole lines, `max_bytes` at most (see the module docstring). `guard()` runs
    before the first write and raises to stop it (`RolesFlipped`, `SiteStateUnknown`).
    Store errors propagate (`ProviderUnavailable`, ...)."""
    try:
        source = primary.head(key)
    except NotFound:
        return LossLogPass(key, requests=1, unchanged="nothing logged yet")
    last = _last_copy(secondary, key)
    requests = 2
    if last is not None and (last.get("size"), last.get("version")) == (source.size, source.version):
        return LossLogPass(key, requests=requests, unchanged="unchanged since the last copy")
    start = max(0, source.size - max_bytes)
    data = b"".join(primary.read(key, max(0, start - 1), source.size)) if source.size else b""
    requests += 1
    if start > 0:  # data begins one byte early: whatever precedes its first newline is torn
        cut = data.find(b"\n")
        data, start = (data[cut + 1 :], start + cut) if cut >= 0 else (b"", source.size)
    end = data.rfind(b"\n") + 1  # the line still being written waits for the next pass
    body, through = data[:end], start + end
    record = {"size": source.size, "version": source.version, "start": start, "through": through}
    if guard is not None:
        guard()
    if last is not None and (last.get("start"), last.get("through")) == (start, through) and through:
        # the same lines as the last copy (the primary grew by part of a line): only the record moves
        secondary.put(key + SHIPPED_SUFFIX, json.dumps(record).encode())
        return LossLogPass(key, requests=requests + 1, through=through, tail=start > 0,
                           unchanged="no new whole line")  # fmt: skip
    if not body:
        return LossLogPass(key, requests=requests, unchanged="no whole line yet")
    secondary.put(key, body)  # the copy first: a record never names lines that did not land
    secondary.put(key + SHIPPED_SUFFIX, json.dumps(record).encode())
    return LossLogPass(key, len(body), requests + 2, through, start > 0)


def _last_copy(secondary: Store, key: str) -> dict | None:
    """The record of the last copy; None when there is none or it cannot be read as one
    (a copy made before these records, by hand, torn): the next copy writes it."""
    try:
        record = json.loads(b"".join(secondary.read(key + SHIPPED_SUFFIX)))
    except (NotFound, ValueError):
        return None
    return record if isinstance(record, dict) else None


def primary_is_active(stores: Mapping[str, Store | None], runbook: str) -> Callable[[], None]:
    """A guard for the loss-log pass: the site state read now is conclusive
    (`SiteStateUnknown` otherwise: unknown is not "never fenced") and names the primary active
    (`RolesFlipped`, one line, otherwise: after a failover the secondary's copy is the
    pre-failure log the proof reads, and the fenced-out primary's is not written over it)."""

    def check() -> None:
        require_active(read_site_state(stores, runbook=runbook), "primary", runbook)

    return check
