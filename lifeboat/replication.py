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

from lifeboat.errors import LifeboatError, ProviderUnavailable
from lifeboat.retention import StoredCheckpoint, plan_retention
from lifeboat.sitestate import SiteState, mirror, read_site_state, require_active
from lifeboat.transfer import Progress, RetryPolicy, TransferIncomplete, TransferReport, copy_prefix
from providers.storage.base import Store

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
        lines = [json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in records]
        if lines:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.writelines(lines)

    def read(self) -> list[LagRecord]:
        if not self.path.exists():
            return []
        return [LagRecord.from_dict(json.loads(line)) for line in self.path.read_text().splitlines() if line]


@dataclass
class ReplicationReport:
    transfers: list[TransferReport] = field(default_factory=list)
    lags: list[LagRecord] = field(default_factory=list)  # replicas completed (or failed) this run
    failed: dict[str, str] = field(default_factory=dict)  # prefix -> error
    dry_run: bool = False

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
    concurrency: int = 8,
    progress: Callable[[StoredCheckpoint], Progress | None] | None = None,
    retry: RetryPolicy | None = None,
    dry_run: bool = False,
    trust_committed: bool = True,
    guard: Callable[[], None] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ReplicationReport:
    """Copy each checkpoint (newest step first) to the same prefix on the secondary.

    A failure on one checkpoint does not stop the older ones; it is reported in `failed`
    and with a not-complete lag record. `progress(checkpoint)` may return a Progress.
    `trust_committed=False` compares every object of already-committed replicas again.
    `guard()` runs before each checkpoint and raises (`RolesFlipped`) to stop the copy when
    the source is no longer the active site (`direction`)."""
    report = ReplicationReport(dry_run=dry_run)
    for ckpt in sorted(checkpoints, key=lambda c: (c.step, c.prefix), reverse=True):
        if guard is not None:
            guard()
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
            )
        except TransferIncomplete as e:
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
        if transfer.markers and not dry_run and (transfer.copied or transfer.server_copied):
            _write_receipt(secondary, ckpt.prefix)
        if transfer.markers and not dry_run and transfer.source_written:
            report.lags.append(
                LagRecord(ckpt.prefix, ckpt.step, transfer.source_written, clock(), rpo_target)
            )
    return report


def _write_receipt(replica: Store, prefix: str) -> None:
    """Where listings carry no checksum (S3), record the replica's CRC32Cs now, so that
    certification during an outage needs no HEAD per object (lifeboat/checkpoints/receipt.py)."""
    if replica.capabilities.crc32c_in_list:
        return
    from lifeboat.checkpoints.receipt import write_receipt

    write_receipt(replica, prefix)


@dataclass(frozen=True)
class Direction:
    """Which way replication goes now: from the active site to the standby."""

    source_role: str  # "primary" or "secondary"
    source: Store
    destination: Store
    state: SiteState
    mirrored: tuple[str, ...] = ()  # stores that missed a fence and were given the record now

    def guard(self, runbook: str, stores: dict[str, Store | None]) -> Callable[[], None]:
        """A check to run before each checkpoint: the source must still be the active site."""
        return lambda: require_active(read_site_state(stores), self.source_role, runbook)


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


def stored_checkpoints(store: Store, layout: str = "auto") -> list[StoredCheckpoint]:
    """Checkpoints in `store` by its layout (top-level directories), newest step first, each
    marked complete or not (lifeboat.checkpoints.layouts)."""
    from lifeboat.checkpoints.layouts import discover, incomplete_reason

    found = discover(store, layout)
    return [
        StoredCheckpoint(d.name, d.step, complete=incomplete_reason(store, found.layout, d) is None)
        for d in found.checkpoints
    ]


def committed_checkpoints(store: Store, layout: str = "auto") -> list[StoredCheckpoint]:
    """The complete (committed) checkpoints in `store`, newest step first."""
    return [c for c in stored_checkpoints(store, layout) if c.complete]


def newest_certified_prefix(secondary: Store, primary: Store | None, layout: str = "auto") -> str | None:
    """Prefix on the secondary of the newest checkpoint that certifies (lifeboat.certify)."""
    from lifeboat.certify import newest_certified

    certified = newest_certified(secondary, primary, layout=layout)
    if certified is None:
        return None
    return certified.uri[len(secondary.uri.rstrip("/")) + 1 :]


def failover_checkpoints(rb, secondary: Store, ledger_file: str | Path | None = None) -> dict[str, str]:
    """Checkpoints on the secondary that an in-progress failover of this runbook resumes
    from, by the RTO ledger (the local ledger file and the ledger objects in the secondary
    store): prefix -> why. A failover that crashed leaves its entry in progress; its
    checkpoint stays protected until the entry is finished."""
    from lifeboat.ledger import LedgerFile, LedgerStore

    root = secondary.uri.rstrip("/") + "/"
    entries = LedgerFile(ledger_file).read(rb.name) + LedgerStore(secondary).read(rb.name)
    found = {}
    for entry in entries:
        if entry.outcome == "in-progress" and entry.checkpoint and entry.checkpoint.startswith(root):
            name = entry.checkpoint[len(root) :].strip("/").split("/")[0]
            found[name] = f"in use by failover run {entry.run_id}"
    return found


def foreign_checkpoints(store: Store, other: Store | None, layout: str = "auto") -> dict[str, str]:
    """Checkpoints in `store` that are not of the active lineage (the site state read from
    `store` and `other`): prefix -> why. Empty when the job was never fenced."""
    from lifeboat.checkpoints.layouts import discover
    from lifeboat.fencing import COMMIT_MARKER
    from lifeboat.sitestate import lineage_problem, read_marker, read_site_state

    lease = read_site_state({"store": store, "other": other}).lease
    if lease is None:
        return {}
    found = {}
    for d in discover(store, layout).checkpoints:
        marker = read_marker(store, d.name) if COMMIT_MARKER in d.markers else None
        if why := lineage_problem(d.name, marker, lease, d.newest):
            found[d.name] = why
    return found


def retention_for(
    rb, secondary: Store, primary: Store | None, *, protect: Iterable[str] = (), dry_run: bool = False
):
    """Apply the runbook's retention to the standby store `secondary` (after a failover,
    the primary's), keeping the newest certified checkpoint (certified against `primary`,
    or its manifests when None or down) and every prefix in `protect` (checkpoints a
    running failover uses). Incomplete ones are kept; so are those of a fenced-out lineage,
    which never count toward the policy (`foreign_checkpoints`)."""
    from lifeboat.retention import apply_retention

    layout = rb.checkpoint.layout.value
    protected = failover_checkpoints(rb, secondary)
    protected.update(dict.fromkeys((p.strip("/") for p in protect), "protected: named with --protect"))
    certified = newest_certified_prefix(secondary, primary, layout)
    if certified is not None:
        protected[certified] = "newest certified checkpoint"
    present = stored_checkpoints(secondary, layout)
    verdicts = plan_retention(
        present,
        keep_last=rb.checkpoint.retention.keep_last,
        keep_every=rb.checkpoint.retention.keep_every,
        protected=protected,
        foreign=foreign_checkpoints(secondary, primary, layout),
    )
    return apply_retention(secondary, verdicts, dry_run=dry_run)


def worth_replicating(rb, sources: Iterable[StoredCheckpoint]) -> list[StoredCheckpoint]:
    """The primary's checkpoints that the secondary's retention would keep: copying one it
    deletes straight after would only churn."""
    retention = rb.checkpoint.retention
    verdicts = plan_retention(sources, keep_last=retention.keep_last, keep_every=retention.keep_every)
    return [v.checkpoint for v in verdicts if v.keep]


def sources_to_replicate(rb, way: Direction) -> list[StoredCheckpoint]:
    """The source's committed checkpoints of the active lineage that retention would keep."""
    layout = rb.checkpoint.layout.value
    foreign = foreign_checkpoints(way.source, way.destination, layout)
    committed = [c for c in committed_checkpoints(way.source, layout) if c.prefix.strip("/") not in foreign]
    return worth_replicating(rb, committed)


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
    )
    return way, report
