"""Retention on the secondary: keep the newest K checkpoints and every Nth step, delete the rest.

`plan_retention` is pure: it decides over checkpoints (prefix, step, complete) and a set of
protected prefixes, which are kept whatever the policy says: `retention_protections` fills
it with any checkpoint a running failover resumes from (by the RTO ledger) and those named
with `--protect`. An incomplete checkpoint (no commit marker: a replication in progress,
or an abandoned one) is never deleted by retention; the next replication finishes it or
certify reports it.

On the secondary the caller also passes `certifiable`: the newest checkpoints that certify,
newest first, up to `keep_last` of them. Then `keep_last` counts certifiable checkpoints
only, nothing older than the `keep_last`-th certifiable one is deleted before it is found,
and when none certifies nothing is deleted at all: retention never leaves zero. A
checkpoint of a fenced-out lineage (`foreign`) never counts and is never deleted.

`apply_retention` deletes a checkpoint commit marker first, then its data, so a deletion
killed mid-way leaves an incomplete checkpoint, never a complete-looking partial one. An
object whose key no store may name is left with one line; it never stops the pass.
`retention_for` is the whole pass on the standby: certify, protect, plan, delete. It acts
only on a conclusive site state of its runbook, reads the checkpoints running failovers
resume from after certifying (the ledger where the flows write it: the local ledger file
and the ledger chain `_lifeboat/chain/` in the sites' stores), and checks the site
state again before each deletion: a plan made before a fence deletes nothing after it (the
store it trims may be the active site's now). While a failover or failback holds the
runbook's lock nothing is deleted (`apply_retention`'s `busy`): the ledger says what a
failover resumes from only once it has certified, the lock says one runs from its start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lifeboat_dr.core.certify import certifiable_prefixes
from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint, foreign_checkpoints, stored_checkpoints
from lifeboat_dr.core.checkpoints.layouts import Discovery, discover
from lifeboat_dr.core.ledger import LedgerFile, LedgerStore
from lifeboat_dr.core.ledger_chain import LedgerChain
from lifeboat_dr.core.sitestate import RolesFlipped, SiteState, read_site_state, site_stores
from lifeboat_dr.core.transfer import COMMIT_ORDER, commit_order
from lifeboat_dr.kernel.errors import RefusedKey
from lifeboat_dr.providers.storage.base import Store


@dataclass(frozen=True)
class RetentionPolicy:
    """A runbook's retention (`checkpoint.retention`)."""

    keep_last: int  # the newest checkpoints kept (on the secondary: the newest certifiable)
    keep_every: int | None = None  # also keep every step that is a multiple of this


@dataclass(frozen=True)
class Verdict:
    checkpoint: StoredCheckpoint
    keep: bool
    reason: str


@dataclass
class RetentionReport:
    verdicts: list[Verdict]
    dry_run: bool
    deleted: list[str] = field(default_factory=list)  # prefixes removed (or, dry run, to remove)
    objects: int = 0  # objects removed (or to remove)
    bytes: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # key no store may name -> its one line
    paused: str = ""  # why it stopped before the end: a failover of the runbook began


def plan_retention(
    checkpoints: Iterable[StoredCheckpoint],
    *,
    keep_last: int,
    keep_every: int | None = None,
    protected: Mapping[str, str] | Iterable[str] = (),
    certifiable: Iterable[str] | None = None,
    foreign: Mapping[str, str] | None = None,
) -> list[Verdict]:
    """One verdict per checkpoint, newest step first.

    `protected` maps prefix -> why (e.g. "resumed by failover run X"), or is a plain set of
    prefixes. `certifiable` (prefixes, see the module docstring) makes `keep_last` count
    certifiable checkpoints; None counts complete ones (the primary's view). `foreign` maps
    prefix -> why for checkpoints that are not of the active lineage (a fenced-out writer's):
    they never count toward `keep_last`, so they cannot push the active lineage's checkpoints
    out, and are left for inspection."""
    if keep_last < 1:
        raise ValueError("keep_last must be at least 1: retention never deletes every checkpoint")
    why = dict(protected) if isinstance(protected, Mapping) else dict.fromkeys(protected, "protected")
    why = {p.strip("/"): reason for p, reason in why.items()}
    good = None if certifiable is None else {p.strip("/") for p in certifiable}
    foreign = {p.strip("/"): reason for p, reason in (foreign or {}).items()}
    ordered = sorted(checkpoints, key=lambda c: (c.step, c.prefix), reverse=True)
    if good is not None and not good:
        return [Verdict(c, True, "nothing certifiable: retention deletes nothing") for c in ordered]
    verdicts, counted = [], 0
    for ckpt in ordered:
        prefix = ckpt.prefix.strip("/")
        if prefix in foreign:
            verdicts.append(
                Verdict(ckpt, True, f"not the active lineage, never certified: {foreign[prefix]}")
            )
            continue
        counts = ckpt.complete if good is None else prefix in good
        if prefix in why:
            verdict = Verdict(ckpt, True, why[prefix])
        elif not ckpt.complete:
            verdict = Verdict(ckpt, True, "incomplete: left for replication or certify")
        elif counted < keep_last and counts:
            verdict = Verdict(
                ckpt, True, f"among the newest {keep_last}" + ("" if good is None else " certifiable")
            )
        elif counted < keep_last:
            verdict = Verdict(ckpt, True, f"not certifiable; kept until {keep_last} newer ones certify")
        elif keep_every and ckpt.step % keep_every == 0:
            verdict = Verdict(ckpt, True, f"step is a multiple of {keep_every}")
        else:
            verdict = Verdict(ckpt, False, "outside the retention policy")
        counted += bool(counts)
        verdicts.append(verdict)
    return verdicts


def apply_retention(
    store: Store,
    verdicts: Sequence[Verdict],
    *,
    dry_run: bool = False,
    markers: tuple[str, ...] = COMMIT_ORDER,
    guard: Callable[[], None] | None = None,
    busy: Callable[[], str | None] | None = None,
) -> RetentionReport:
    """Delete what the verdicts drop (commit markers first); with `dry_run`, only count.
    `guard()` runs right before each deletion and raises to stop (the site state moved).
    An object whose key the store refuses (`RefusedKey`: put there behind Lifeboat, a `..`
    or empty segment) is left in place, one line in `refused`; the rest is still deleted.

    `busy()` says why not to delete now (a failover of the runbook holds its lock: it may be
    certifying the very checkpoint), or None. It is asked before each checkpoint and again
    after its first commit marker is gone: a failover that took its lock after the first
    question certifies after that marker went, so it never chooses this checkpoint; one that
    took it before stops the deletion there, the checkpoint's data whole (`paused`)."""
    report = RetentionReport(verdicts=list(verdicts), dry_run=dry_run)
    for verdict in verdicts:
        if verdict.keep:
            continue
        if guard is not None and not dry_run:
            guard()
        if busy is not None and not dry_run and (why := busy()):
            report.paused = why
            return report
        prefix = verdict.checkpoint.prefix.strip("/") + "/"
        objects = list(store.list(prefix))
        report.deleted.append(verdict.checkpoint.prefix)
        report.objects += len(objects)
        report.bytes += sum(o.size for o in objects)
        if dry_run:
            continue
        # markers first, in reverse commit order, so an interrupted deletion is never "complete"
        marks = sorted(
            (o for o in objects if o.key.rsplit("/", 1)[-1] in markers),
            key=lambda o: commit_order(o.key, markers),
            reverse=True,
        )
        for n, obj in enumerate([*marks, *(o for o in objects if o not in marks)]):
            try:
                store.delete(obj.key)
            except RefusedKey as e:
                report.refused[obj.key] = f"{e}; left in place: remove it with the store's own tools"
                continue
            if n == 0 and busy is not None and (why := busy()):
                report.paused = f"{why}; {verdict.checkpoint.prefix} lost its first marker, its data is whole"
                return report
    return report


def failover_checkpoints(
    runbook: str,
    secondary: Store,
    ledger_file: str | Path | None = None,
    others: Iterable[Store | None] = (),
) -> dict[str, str]:
    """Checkpoints on `secondary` that an in-progress failover of `runbook` resumes from, by
    the RTO ledger where the flows write it: the local ledger file, the ledger chain
    (`_lifeboat/chain/`) in `secondary` and the `others` sites' stores, and ledger objects
    (`_lifeboat/ledger/`) in `secondary`: prefix -> why. A failover that crashed leaves its
    entry in progress; its checkpoint stays protected until the entry is finished."""
    root = secondary.uri.rstrip("/") + "/"
    chain = LedgerChain([secondary, *(s for s in others if s is not None)])
    entries = (
        LedgerFile(ledger_file).read(runbook)
        + chain.read(runbook, whole=True)  # a chain read in part could hide the entry in progress
        + LedgerStore(secondary).read(runbook)
    )
    found = {}
    for entry in entries:
        if entry.outcome == "in-progress" and entry.checkpoint and entry.checkpoint.startswith(root):
            name = entry.checkpoint[len(root) :].strip("/").split("/")[0]
            found[name] = f"in use by failover run {entry.run_id}"
    return found


def retention_protections(
    runbook: str, secondary: Store, protect: Iterable[str] = (), others: Iterable[Store | None] = ()
) -> dict[str, str]:
    """Prefix -> why, for checkpoints retention must keep whatever the policy says: those an
    in-progress failover resumes from (`others`: the other sites' stores, whose ledger
    chain is read too), and `--protect` ones (a fenced-out lineage's are kept by
    `foreign_checkpoints`)."""
    protected = failover_checkpoints(runbook, secondary, others=others)
    protected.update(dict.fromkeys((p.strip("/") for p in protect), "protected: named with --protect"))
    return protected


def retention_for(
    secondary: Store,
    primary: Store | None,
    *,
    runbook: str,
    layout: str,
    policy: RetentionPolicy,
    protect: Iterable[str] = (),
    dry_run: bool = False,
    primary_found: Discovery | None = None,
    secondary_found: Discovery | None = None,
    sites: Mapping[str, Store | None] | None = None,
    planned: SiteState | None = None,
) -> RetentionReport:
    """Apply `runbook`'s retention `policy` to the secondary store: keep the newest
    `keep_last` checkpoints that certify (against `primary`, or its manifests when None),
    everything newer, and `retention_protections`. Nothing is deleted when none certifies or
    when `primary` is given but cannot be read (certification would be on manifests alone).

    The secondary is listed once, for certification and retention together, or not at all
    when `secondary_found` is given (the store as this run's copy left it,
    `ReplicationReport.destination_found`); the primary not at all when `primary_found` (its
    discovery from this run) is given. The site state (`sites`, the stores by role; by
    default `secondary` the secondary's and `primary` the primary's) is read once for both,
    must be conclusive, and is read again before each deletion (`apply_retention`'s guard).
    `planned`: the site state the caller chose `secondary` as the standby under (a replication
    pass's `Direction.state`): when a fence moved it since, nothing is deleted (`RolesFlipped`):
    the store may be the active site's now."""
    sites = sites if sites is not None else site_stores(primary, secondary)
    state = read_site_state(sites, runbook=runbook)
    if planned is not None:
        _same(planned, state, secondary)
    found = secondary_found or discover(secondary, layout)
    present = stored_checkpoints(secondary, layout, found)
    lease = state.lease
    good, source_error = certifiable_prefixes(
        secondary,
        primary,
        layout=layout,
        want=policy.keep_last,
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
        keep_last=policy.keep_last,
        keep_every=policy.keep_every,
        protected=retention_protections(runbook, secondary, protect, [primary]),
        certifiable=good,
        foreign=foreign_checkpoints(secondary, primary, layout, found, lease),
    )
    guard = _unchanged(state, sites, runbook, secondary)
    return apply_retention(
        secondary, verdicts, dry_run=dry_run, guard=guard, busy=_failover_running(sites, runbook)
    )


def _failover_running(sites: Mapping[str, Store | None], runbook: str) -> Callable[[], str | None]:
    """Why not to delete now: a failover or failback of `runbook` holds its lock (in the
    secondary's store, `lifeboat_dr.core.lock`)."""
    from lifeboat_dr.core.lock import holder_now

    def busy() -> str | None:
        store = sites.get("secondary")
        holder = holder_now(store, runbook) if store is not None else None
        return f"retention waits: {holder.describe()} holds the lock of {runbook}" if holder else None

    return busy


def _unchanged(
    planned: SiteState, sites: Mapping[str, Store | None], runbook: str, store: Store
) -> Callable[[], None]:
    """The guard before each deletion of a plan made under `planned`: `RolesFlipped` when the
    site state moved since (a fence: the store may be the active site's now)."""
    return lambda: _same(planned, read_site_state(sites, runbook=runbook), store)


def _same(planned: SiteState, now: SiteState, store: Store) -> None:
    if (now.epoch, now.active) != (planned.epoch, planned.active):
        raise RolesFlipped(
            f"retention on {store.uri} stops: the site state changed since it was planned "
            f"({planned.describe()}; now {now.describe()}); nothing more is deleted"
        )
