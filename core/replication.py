"""Replication of committed checkpoints to the secondary store, and the lag it runs at.

`replicate_checkpoints` copies checkpoints newest first with `copy_prefix` (only what is
missing or differs, markers last), then measures each newly completed replica's lag: the
replica's completion time minus the source checkpoint's write time. A lag over the RPO
target means a failover right now would lose more than the target allows; the caller
(the `replicate` flow) turns such records into `lifeboat.replication.lag_exceeded` events.
A checkpoint that failed to replicate is reported with its lag so far (still growing).

Lag records are JSON lines (`LagLog`), one per replica completed, newest last.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lifeboat_dr.core.checkpoints.layouts import POINTERS, Discovery, discover, incomplete_reason, rediscover
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME, write_receipt
from lifeboat_dr.core.retention import StoredCheckpoint, plan_retention
from lifeboat_dr.core.sitestate import SiteState, mirror, read_site_state, require_active
from lifeboat_dr.core.transfer import (
    DEFAULT_CONCURRENCY,
    Progress,
    RetryPolicy,
    TransferIncomplete,
    TransferReport,
    copy_prefix,
)
from lifeboat_dr.kernel.errors import LifeboatError, NotFound, ProviderUnavailable, WriteFailed
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

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


@dataclass
class ReplicationReport:
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
    `also`: keys copied after the checkpoints and pointers (the pre-failure loss log).
    `guard()` runs before each checkpoint and raises (`RolesFlipped`) to stop the copy when
    the source is no longer the active site (`direction`).
    `source_found` / `destination_found`: discoveries of the primary / secondary taken for
    this run; each copy starts from their listings (no listing of its own), and
    `report.destination_found` is the secondary as the run left it."""
    report = ReplicationReport(dry_run=dry_run)
    checkpoints = list(checkpoints)
    left: dict[str, dict[str, ObjectInfo] | None] = {}  # directory -> as the copy left it (None: unknown)
    for ckpt in sorted(checkpoints, key=lambda c: (c.step, c.prefix), reverse=True):
        if guard is not None:
            guard()
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
            )
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
        pointers = _copy_pointers(primary, secondary, done, report)
        for key in also:
            _copy_file(primary, secondary, key, report)
    if destination_found is not None:
        report.destination_found = rediscover(secondary, destination_found, left, pointers)
    return report


def _listed(store: Store, found: Discovery | None, name: str) -> list[ObjectInfo] | None:
    """A top-level directory's objects as `found` listed them; None when it did not look or
    cannot tell them (a nested prefix, or a directory it did not take for a checkpoint)."""
    if found is None or "/" in name:
        return None
    for d in found.checkpoints:
        if d.name == name:
            return list(d.files(store))
    return None if name in found.names else []


def _copy_file(primary: Store, secondary: Store, key: str, report: ReplicationReport) -> None:
    """One small root file, copied when it differs; a failure lands in `report.failed`."""
    try:
        body = b"".join(primary.read(key))
        try:
            current = b"".join(secondary.read(key))
        except NotFound:
            current = None
        if current != body:
            secondary.put(key, body)
            report.copied_files.append(key)
    except NotFound:
        return  # nothing logged yet
    except LifeboatError as e:
        report.failed[key] = f"{type(e).__name__}: {e}"


def _copy_pointers(
    primary: Store, secondary: Store, done: dict[int, str], report: ReplicationReport
) -> dict[str, ObjectInfo]:
    """Copy the root pointer files (`latest`, `latest_checkpointed_iteration.txt`) last, and
    only one whose step is complete on the secondary now (replicated or already there): a
    pointer is the DeepSpeed / Megatron commit point, so it never runs ahead of its data.
    When the step it names could not be replicated, the secondary's pointer names the newest
    older step that was (in the same form: a directory tag or an iteration number).
    Returns the pointers written, as they landed."""
    from lifeboat_dr.core.checkpoints.protocols import pointer_step

    written = {}
    for name in POINTERS:
        try:
            text = b"".join(primary.read(name))
            current = _read_or_none(secondary, name)
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
            try:
                written[name] = secondary.put(name, text)
            except LifeboatError as e:
                report.failed[name] = f"{type(e).__name__}: {e}"
                continue
            report.pointers.append(name)
    return written


def _read_or_none(store: Store, key: str) -> bytes | None:
    try:
        return b"".join(store.read(key))
    except NotFound:
        return None


def _write_receipt(replica: Store, prefix: str, transfer: TransferReport) -> ObjectInfo | None:
    """Where listings carry no checksum (S3), record the replica's CRC32Cs now, from what the
    copy already knows, so that certification during an outage needs no HEAD per object
    (core/checkpoints/receipt.py). Returns the receipt as it landed."""

    if replica.capabilities.crc32c_in_list:
        return None
    return write_receipt(replica, prefix, transfer.landed)


def loss_log_key(rb) -> str | None:
    """The runbook's pre-failure loss log as a key of the primary store, when it lives there:
    replication then copies it beside the checkpoints, and the failover reads that copy."""
    where = rb.verify.loss_log
    if not where or "://" not in where:
        return None
    uri, root = rb.store_uri(where), rb.store_uri(rb.primary.store).rstrip("/") + "/"
    return uri[len(root) :] if uri.startswith(root) and len(uri) > len(root) else None


def loss_log_for_failover(rb) -> str | None:
    """Where the failover reads the pre-failure loss log: the secondary's copy of one kept in
    the primary store (the primary is down), else the runbook's own path or URI."""
    key = loss_log_key(rb)
    if key is None:
        return rb.verify.loss_log
    return rb.store_uri(rb.secondary.store).rstrip("/") + "/" + key


@dataclass(frozen=True)
class Direction:
    """Which way replication goes now: from the active site to the standby."""

    source_role: str  # "primary" or "secondary"
    source: Store
    destination: Store
    state: SiteState
    mirrored: tuple[str, ...] = ()  # stores that missed a fence and were given the record now

    def guard(self, runbook: str, stores: dict[str, Store | None]) -> Callable[[], None]:
        """A check to run before each checkpoint: the source must still be the active site.
        The first call trusts `state`, read by `direction` just before; later ones read the
        site state again."""
        fresh = [True]

        def check() -> None:
            if fresh[0]:
                fresh[0] = False
                return
            require_active(read_site_state(stores), self.source_role, runbook)

        return check


def direction(
    rb, primary: Store | None, secondary: Store | None, *, source: str = "active", dry_run=False
) -> Direction:
    """Replication's direction by the site state (both stores, newest epoch wins).

    A store that missed a fence (it was down: a zombie primary's) is given the newest record
    first, conditionally, so its writers' next guarded commit stops them (not in a dry run).
    `source` pins the source site: `RolesFlipped` (one line) when it is not the active one."""
    stores = {"primary": primary, "secondary": secondary}
    state = read_site_state(stores)
    mirrored = () if dry_run else tuple(mirror(state, stores))
    role = state.active if source == "active" else source
    require_active(state, role, rb.name)
    src, dst = stores[role], stores["secondary" if role == "primary" else "primary"]
    if src is None or dst is None:
        raise ProviderUnavailable(
            f"{rb.name}: the {role if src is None else 'standby'} store cannot be opened"
        )
    return Direction(role, src, dst, state, mirrored)


def default_lag_log(rb) -> Path:
    """`.lifeboat/<runbook name>/replication-lag.jsonl` under the working directory."""
    return Path(".lifeboat") / rb.name / "replication-lag.jsonl"


def stored_checkpoints(store: Store, layout: str = "auto", found=None) -> list[StoredCheckpoint]:
    """Checkpoints in `store` by its layout (top-level directories), newest step first, each
    marked complete or not (lifeboat_dr.core.checkpoints.layouts). `found`: a discovery of `store`
    already taken (no second listing)."""
    found = found or discover(store, layout)
    return [
        StoredCheckpoint(
            d.name, d.step, complete=incomplete_reason(store, found.layout, d, found.pointers) is None
        )
        for d in found.checkpoints
    ]


def committed_checkpoints(store: Store, layout: str = "auto", found=None) -> list[StoredCheckpoint]:
    """The complete (committed) checkpoints in `store`, newest step first."""
    return [c for c in stored_checkpoints(store, layout, found) if c.complete]


def failover_checkpoints(rb, secondary: Store, ledger_file: str | Path | None = None) -> dict[str, str]:
    """Checkpoints on the secondary that an in-progress failover of this runbook resumes
    from, by the RTO ledger (the local ledger file and the ledger objects in the secondary
    store): prefix -> why. A failover that crashed leaves its entry in progress; its
    checkpoint stays protected until the entry is finished."""
    from lifeboat_dr.core.ledger import LedgerFile, LedgerStore

    root = secondary.uri.rstrip("/") + "/"
    entries = LedgerFile(ledger_file).read(rb.name) + LedgerStore(secondary).read(rb.name)
    found = {}
    for entry in entries:
        if entry.outcome == "in-progress" and entry.checkpoint and entry.checkpoint.startswith(root):
            name = entry.checkpoint[len(root) :].strip("/").split("/")[0]
            found[name] = f"in use by failover run {entry.run_id}"
    return found


_READ = object()  # foreign_checkpoints' default: read the site state from the stores


def foreign_checkpoints(
    store: Store, other: Store | None, layout: str = "auto", found=None, lease=_READ
) -> dict[str, str]:
    """Checkpoints in `store` that are not of the active lineage (the site state read from
    `store` and `other`, unless its `lease` is given): prefix -> why. Empty when the job
    was never fenced. `found`: the discovery of `store` already taken."""
    from lifeboat_dr.core.fencing import COMMIT_MARKER
    from lifeboat_dr.core.sitestate import lineage_problem, read_marker

    if lease is _READ:
        lease = read_site_state({"store": store, "other": other}).lease
    if lease is None:
        return {}
    out = {}
    for d in (found or discover(store, layout)).checkpoints:
        marker = read_marker(store, d.name) if COMMIT_MARKER in d.markers else None
        if why := lineage_problem(d.name, marker, lease, d.newest):
            out[d.name] = why
    return out


def retention_protections(rb, secondary: Store, protect: Iterable[str] = ()) -> dict[str, str]:
    """Prefix -> why, for checkpoints retention must keep whatever the policy says: those an
    in-progress failover resumes from, and `--protect` ones (a fenced-out lineage's are kept
    by `foreign_checkpoints`)."""
    protected = failover_checkpoints(rb, secondary)
    protected.update(dict.fromkeys((p.strip("/") for p in protect), "protected: named with --protect"))
    return protected


def retention_for(
    rb,
    secondary: Store,
    primary: Store | None,
    *,
    protect: Iterable[str] = (),
    dry_run: bool = False,
    primary_found=None,
    secondary_found=None,
):
    """Apply the runbook's retention to the secondary store: keep the newest `keep_last`
    checkpoints that certify (against `primary`, or its manifests when None), everything
    newer, and `retention_protections`. Nothing is deleted when none certifies or when
    `primary` is given but cannot be read (certification would be on manifests alone).

    The secondary is listed once, for certification and retention together, or not at all
    when `secondary_found` is given (the store as this run's copy left it,
    `ReplicationReport.destination_found`); the primary not at all when `primary_found` (its
    discovery from this run) is given. The site state is read once (one request per store)
    for both."""
    from lifeboat_dr.core.certify import certifiable_prefixes
    from lifeboat_dr.core.retention import RetentionReport, Verdict, apply_retention

    layout = rb.checkpoint.layout.value
    keep_last = rb.checkpoint.retention.keep_last
    found = secondary_found or discover(secondary, layout)
    present = stored_checkpoints(secondary, layout, found)
    lease = read_site_state({"store": secondary, "other": primary}).lease
    good, source_error = certifiable_prefixes(
        secondary,
        primary,
        layout=layout,
        want=keep_last,
        found=found,
        source_found=primary_found,
        lease=lease,
    )
    if source_error:
        why = f"source unreachable ({source_error}): retention deletes nothing"
        ordered = sorted(present, key=lambda c: (c.step, c.prefix), reverse=True)
        return RetentionReport(verdicts=[Verdict(c, True, why) for c in ordered], dry_run=dry_run)
    verdicts = plan_retention(
        present,
        keep_last=keep_last,
        keep_every=rb.checkpoint.retention.keep_every,
        protected=retention_protections(rb, secondary, protect),
        certifiable=good,
        foreign=foreign_checkpoints(secondary, primary, layout, found, lease),
    )
    return apply_retention(secondary, verdicts, dry_run=dry_run)


def worth_replicating(rb, sources: Iterable[StoredCheckpoint]) -> list[StoredCheckpoint]:
    """The primary's checkpoints that the secondary's retention would keep: copying one it
    deletes straight after would only churn."""
    retention = rb.checkpoint.retention
    verdicts = plan_retention(sources, keep_last=retention.keep_last, keep_every=retention.keep_every)
    return [v.checkpoint for v in verdicts if v.keep]


def sources_to_replicate(rb, way: Direction, found=None) -> list[StoredCheckpoint]:
    """The source's committed checkpoints of the active lineage that retention would keep.
    `found`: the discovery of the source already taken (it is listed once per run)."""
    layout = rb.checkpoint.layout.value
    found = found or discover(way.source, layout)
    foreign = foreign_checkpoints(way.source, way.destination, layout, found, way.state.lease)
    committed = [
        c for c in committed_checkpoints(way.source, layout, found) if c.prefix.strip("/") not in foreign
    ]
    return worth_replicating(rb, committed)


def hand_back(rb, primary: Store | None, secondary: Store | None) -> ReplicationReport:
    """A failback's last reverse copy, once its fence made the primary active: the checkpoints
    the secondary's job committed before that fence, to the primary. Only the lineage the
    fence sealed counts (`foreign_checkpoints`): a commit that lost to the fence stays where
    it is. `RolesFlipped` (one line) unless the primary is the active site now."""
    stores = {"primary": primary, "secondary": secondary}
    state = read_site_state(stores)
    require_active(state, "primary", rb.name)
    if primary is None or secondary is None:
        raise ProviderUnavailable(f"{rb.name}: a failback's stores cannot both be opened")
    way = Direction("secondary", secondary, primary, state)
    return replicate_checkpoints(secondary, primary, sources_to_replicate(rb, way), rpo_target=rb.rpo_target)


def replicate_by_site_state(
    rb, primary: Store | None, secondary: Store | None, *, dry_run: bool = False
) -> tuple[Direction, ReplicationReport]:
    """One replication pass the way the site state says, outside Prefect (a failback's
    catch-up, the demo): the `replicate` flow's copy without its lag events and retention."""
    way = direction(rb, primary, secondary, dry_run=dry_run)
    report = replicate_checkpoints(
        way.source,
        way.destination,
        sources_to_replicate(rb, way),
        rpo_target=rb.rpo_target,
        dry_run=dry_run,
        guard=way.guard(rb.name, {"primary": primary, "secondary": secondary}),
        also=[k for k in [loss_log_key(rb)] if k] if way.source_role == "primary" else [],
    )
    return way, report
