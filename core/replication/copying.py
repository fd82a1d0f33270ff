"""Copying committed checkpoints to the other site's store, with their receipts and pointers.

`replicate_checkpoints` copies checkpoints newest first with `copy_prefix` (only what is
missing or differs, markers last), writes a CRC32C receipt beside each replica on a store
whose listings carry no checksum, copies the root pointer files last (never ahead of the
data they name) and then the pre-failure loss log (`also`: whole lines, bounded, guarded,
core/replication/losslog.py; it also has a pass of its own, more often). It
measures each newly completed replica's lag (core/replication/lag.py). Which way it copies, and what, is core/replication/direction.py's.

A copy planned before a fence must not land after it: the guard (the site state read again)
runs before each checkpoint's first write, before its commit markers and before the root
pointers, and every write is conditional on what the copy planned against
(core/transfer.py; a pointer create-only or if-match on the version read). A guard that
stops the copy (`RolesFlipped`, `SiteStateUnknown`) stops the whole pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.checkpoints.layouts import POINTERS, CheckpointDir, Discovery, rediscover
from lifeboat_dr.core.checkpoints.protocols import pointer_step
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME, write_receipt
from lifeboat_dr.core.replication.lag import LagRecord
from lifeboat_dr.core.replication.losslog import ship_loss_log
from lifeboat_dr.core.transfer import (
    DEFAULT_CONCURRENCY,
    Progress,
    RetryPolicy,
    TransferIncomplete,
    TransferReport,
    copy_prefix,
)
from lifeboat_dr.kernel.errors import LifeboatError, NotFound, SiteStateUnknown, StopFailover
from lifeboat_dr.providers.storage.base import ObjectInfo, Store


@dataclass
class ReplicationReport:
    """One replication pass: what it copied, how far behind each replica landed, what failed."""

    transfers: list[TransferReport] = field(default_factory=list)
    lags: list[LagRecord] = field(default_factory=list)  # replicas completed (or failed) this run
    failed: dict[str, str] = field(default_factory=dict)  # prefix -> error
    pointers: list[str] = field(default_factory=list)  # root pointer files copied, last
    copied_files: list[str] = field(default_factory=list)  # other root files (the loss log)
    dry_run: bool = False
    # the destination as this run left it, when given the discovery it started from: what
    # certification and retention read next, without listing the destination again
    destination_found: Discovery | None = None

    @property
    def exceeded(self) -> list[LagRecord]:
        return [r for r in self.lags if r.exceeded]

    @property
    def bytes_copied(self) -> int:
        return sum(t.bytes_copied for t in self.transfers)


def replicate_checkpoints(
    primary: Store,
    secondary: Store,
    checkpoints: Iterable[StoredCheckpoint],
    *,
    rpo_target: timedelta,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Callable[[StoredCheckpoint], Progress | None] | None = None,
    retry: RetryPolicy | None = None,
    dry_run: bool = False,
    trust_committed: bool = True,
    guard: Callable[[], None] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    also: Iterable[str] = (),
    source_found: Discovery | None = None,
    destination_found: Discovery | None = None,
) -> ReplicationReport:
    """Copy each checkpoint (newest step first) to the same prefix on the secondary.

    A failure on one checkpoint does not stop the older ones; it is reported in `failed`
    and with a not-complete lag record. `progress(checkpoint)` may return a Progress.
    `trust_committed=False` compares every object of already-committed replicas again.
    `also`: loss logs copied after the checkpoints and pointers (`ship_loss_log`, guarded).
    `guard()` runs before each checkpoint's first write and before its markers (a replica
    already up to date costs none), and before the root pointers; it raises (`RolesFlipped`,
    `SiteStateUnknown`) to stop the pass when the source is no longer the active site or the
    site state is unknown (`Direction.guard`).
    `source_found` / `destination_found`: discoveries of the primary / secondary taken for
    this run; each copy starts from their listings (no listing of its own), and
    `report.destination_found` is the secondary as the run left it."""
    report = ReplicationReport(dry_run=dry_run)
    checkpoints = list(checkpoints)
    left: dict[str, Mapping[str, ObjectInfo] | None] = {}  # directory -> as the copy left it (None: unknown)
    for ckpt in sorted(checkpoints, key=lambda c: (c.step, c.prefix), reverse=True):
        name, nested = ckpt.prefix.strip("/"), "/" in ckpt.prefix.strip("/")
        left[name.split("/")[0]] = None
        try:
            transfer = copy_prefix(
                primary,
                secondary,
                ckpt.prefix,
                ckpt.prefix,
                concurrency=concurrency,
                progress=progress(ckpt) if progress else None,
                retry=retry,
                dry_run=dry_run,
                trust_committed=trust_committed,
                sources=_listed(primary, source_found, name),
                present=_listed(secondary, destination_found, name),
                before_commit=guard,
            )
        except (StopFailover, SiteStateUnknown):
            raise  # the site state moved or is unknown: nothing more is written
        except TransferIncomplete as e:
            if not nested:
                left[name] = e.report.destination
            report.transfers.append(e.report)
            report.failed[ckpt.prefix] = str(e)
            if e.report.source_written:
                report.lags.append(
                    LagRecord(ckpt.prefix, ckpt.step, e.report.source_written, clock(), rpo_target, False)
                )
            continue
        except LifeboatError as e:
            report.failed[ckpt.prefix] = f"{type(e).__name__}: {e}"
            continue
        report.transfers.append(transfer)
        # landed now: something was copied (markers go last, so the copy is whole); layouts
        # whose commit point is a root pointer (DeepSpeed, Megatron) have no marker inside
        landed = not dry_run and bool(transfer.copied or transfer.server_copied)
        if landed and (receipt := _write_receipt(secondary, ckpt.prefix, transfer)):
            transfer.destination[RECEIPT_NAME] = receipt
        if not nested:
            left[name] = transfer.destination
        if landed and transfer.source_written:
            report.lags.append(
                LagRecord(ckpt.prefix, ckpt.step, transfer.source_written, clock(), rpo_target)
            )
    pointers: dict[str, ObjectInfo] = {}
    if not dry_run:
        done = {c.step: c.prefix for c in checkpoints if c.prefix not in report.failed}
        pointers = _copy_pointers(primary, secondary, done, report, guard)
        for key in also:
            _copy_file(primary, secondary, key, report, guard)
    if destination_found is not None:
        report.destination_found = rediscover(secondary, destination_found, left, pointers)
    return report


def _listed(store: Store, found: Discovery | None, name: str) -> Iterable[ObjectInfo] | None:
    """A top-level directory's objects as `found` listed them (read again from the
    discovery for each pass of the copy, never held as a list); None when it did not look
    or cannot tell them (a nested prefix, or a directory it did not take for a checkpoint)."""
    if found is None or "/" in name:
        return None
    for d in found.checkpoints:
        if d.name == name:  # held or spilled: the same objects each pass (else listed once)
            return _Files(d, store) if d.objects is not None or d.spilled else list(d.files(store))
    return None if name in found.names else []


class _Files:
    """A checkpoint directory's listing, iterable more than once (`CheckpointDir.files`)."""

    def __init__(self, directory: CheckpointDir, store: Store):
        self._directory, self._store = directory, store

    def __iter__(self) -> Iterator[ObjectInfo]:
        return self._directory.files(self._store)


def _copy_file(
    primary: Store, secondary: Store, key: str, report: ReplicationReport, guard: Callable[[], None] | None
) -> None:
    """The loss log, by its own pass's rules (core/replication/losslog.py: when it changed,
    whole lines, bounded); a store failure lands in `report.failed`."""
    try:
        if ship_loss_log(primary, secondary, key, guard=guard).copied_bytes:
            report.copied_files.append(key)
    except (StopFailover, SiteStateUnknown):
        raise
    except LifeboatError as e:
        report.failed[key] = f"{type(e).__name__}: {e}"


def _copy_pointers(
    primary: Store,
    secondary: Store,
    done: dict[int, str],
    report: ReplicationReport,
    guard: Callable[[], None] | None = None,
) -> dict[str, ObjectInfo]:
    """Copy the root pointer files (`latest`, `latest_checkpointed_iteration.txt`) last, and
    only one whose step is complete on the secondary now (replicated or already there): a
    pointer is the DeepSpeed / Megatron commit point, so it never runs ahead of its data.
    When the step it names could not be replicated, the secondary's pointer names the newest
    older step that was (in the same form: a directory tag or an iteration number). Each is
    written after `guard()`, conditionally on the version read (create-only where there was
    none). Returns the pointers written, as they landed."""
    written = {}
    for name in POINTERS:
        try:
            text = b"".join(primary.read(name))
            current, version = _read_versioned(secondary, name)
        except NotFound:
            continue
        except LifeboatError as e:
            report.failed[name] = f"{type(e).__name__}: {e}"
            continue
        step = pointer_step(text.decode("utf-8", "replace"))
        if step is not None and step not in done:
            older = [s for s in done if s < step]
            if not older:
                continue  # nothing it could name is on the secondary: the old pointer stays
            newest = max(older)
            text = (done[newest].strip("/") if not text.strip().isdigit() else str(newest)).encode()
            have = pointer_step(current.decode("utf-8", "replace")) if current else None
            if have is not None and have >= newest:
                continue  # never move the secondary's pointer back
        elif step is None:
            continue
        if current != text:
            if guard is not None:
                guard()
            cond = {}
            if secondary.capabilities.conditional_writes:
                cond = {"if_match": version} if version is not None else {"if_none_match": True}
            try:
                written[name] = secondary.put(name, text, **cond)
            except LifeboatError as e:
                report.failed[name] = f"{type(e).__name__}: {e}"
                continue
            report.pointers.append(name)
    return written


def _read_versioned(store: Store, key: str) -> tuple[bytes | None, str | None]:
    """An object's bytes and the version they are (re-read when it changed in between);
    (None, None) when there is none."""
    for _ in range(5):
        try:
            version = store.head(key).version
            data = b"".join(store.read(key))
            if store.head(key).version == version:
                return data, version
        except NotFound:
            return None, None
    return data, None


def _write_receipt(replica: Store, prefix: str, transfer: TransferReport) -> ObjectInfo | None:
    """Where listings carry no checksum (S3), record the replica's CRC32Cs now, from what the
    copy already knows, so that certification during an outage needs no HEAD per object
    (core/checkpoints/receipt.py). Returns the receipt as it landed."""
    if replica.capabilities.crc32c_in_list:
        return None
    return write_receipt(replica, prefix, transfer.landed)
