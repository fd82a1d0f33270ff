"""Retention on the secondary: keep the newest K checkpoints and every Nth step, delete the rest.

`plan_retention` is pure: it decides over checkpoints (prefix, step, complete) and a set of
protected prefixes, which the caller fills with any checkpoint a running failover resumes
from (and, later, the active lineage's). Those are kept whatever the policy says. An
incomplete checkpoint (no commit marker: a replication in progress, or an abandoned one) is
never deleted by retention; the next replication finishes it or certify reports it.

On the secondary the caller also passes `certifiable`: the newest checkpoints that certify,
newest first, up to `keep_last` of them. Then `keep_last` counts certifiable checkpoints
only, nothing older than the `keep_last`-th certifiable one is deleted before it is found,
and when none certifies nothing is deleted at all: retention never leaves zero.

`apply_retention` deletes a checkpoint commit marker first, then its data, so a deletion
killed mid-way leaves an incomplete checkpoint, never a complete-looking partial one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lifeboat_dr.core.transfer import COMMIT_ORDER, commit_order
from lifeboat_dr.providers.storage.base import Store


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint directory in a store, as retention sees it."""

    prefix: str  # key prefix relative to the store root, e.g. "run/step-1200"
    step: int
    complete: bool = True  # its commit marker is present


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
) -> RetentionReport:
    """Delete what the verdicts drop (commit markers first); with `dry_run`, only count."""
    report = RetentionReport(verdicts=list(verdicts), dry_run=dry_run)
    for verdict in verdicts:
        if verdict.keep:
            continue
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
        for obj in [*marks, *(o for o in objects if o not in marks)]:
            store.delete(obj.key)
    return report
