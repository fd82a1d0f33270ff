"""`lifeboat replicate RUNBOOK [--json]`: copy committed checkpoints to the secondary, then apply
retention. Progress is printed line by line; with `--json` those lines go to stderr and stdout
is one JSON document: what was copied, skipped, refused and failed, the lag, what retention did."""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
from pathlib import Path

from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replicate",
        help=COMMANDS["replicate"],
        description=(
            "Copy the active site's committed checkpoints to the standby's store, newest first: only "
            "what is missing or differs (size + CRC32C), verified end to end, commit marker last. "
            "The site state decides the direction (primary to secondary until a failover, then back). "
            "Then delete what the runbook's retention drops on the standby (never the newest certified "
            "checkpoint, never for a fenced-out lineage). Exit 1 when a checkpoint failed to replicate "
            "(a rerun resumes it); a source that is not the active site is refused in one line; exit 75 "
            "when the site state is unknown (a store that holds it did not answer): nothing is copied or "
            "deleted, retry."
        ),
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--from",
        dest="source",
        choices=("active", "primary", "secondary"),
        default="active",
        help="the site to copy from: refused unless it is the active one (default: the active one)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be copied and deleted; change nothing"
    )
    p.add_argument(
        "--recheck",
        action="store_true",
        help="compare every object of replicas already committed (size + CRC32C), not only their markers",
    )
    p.add_argument("--retention-only", action="store_true", help="skip copying; only apply retention")
    p.add_argument("--concurrency", type=int, default=32, metavar="N", help="objects in flight (default 32)")
    p.add_argument(
        "--protect",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a checkpoint prefix retention must keep (e.g. one a running failover resumes from); repeatable",
    )
    p.add_argument(
        "--lag-log",
        metavar="FILE",
        help="JSON lines lag log (default .lifeboat/<name>/replication-lag.jsonl)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar with bytes/s on stderr (default: when stderr is a terminal)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON document on stdout (the progress lines go to stderr)",
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.core.lock import one_replication_pass
    from lifeboat_dr.flows.wiring import open_sites
    from lifeboat_dr.kernel.errors import ConfigError, StandDown
    from lifeboat_dr.runbooks.loader import load_runbook

    if args.concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, not {args.concurrency}")
    rb = load_runbook(args.runbook)
    doc: dict = {"runbook": rb.name, "dry_run": args.dry_run}
    say = functools.partial(print, file=sys.stderr) if args.json else print
    if rb.replication == "gcs-dual-region":
        from lifeboat_dr.flows.wiring import one_bucket

        say(one_bucket(rb))
        if args.json:
            print(json.dumps(doc | {"one_bucket": one_bucket(rb), "exit": 0}, indent=2))
        return 0
    primary, secondary = open_sites(rb)
    try:
        with one_replication_pass(secondary, rb.name, f"cli-{os.getpid()}", dry_run=args.dry_run):
            code = _one_pass(args, rb, primary, secondary, say, doc)
    except StandDown as e:  # another pass of this runbook is running: this one changes nothing
        print(e, file=sys.stderr)
        code, doc["stood_down"] = 0, str(e)
    if args.json:
        print(json.dumps(doc | {"exit": code}, indent=2))
    return code


def _one_pass(args, rb, primary, secondary, say, doc: dict) -> int:
    """One pass; its lines through `say`, its result into `doc` (`--json`)."""
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.core.replication.direction import direction, sources_to_replicate
    from lifeboat_dr.core.replication.lag import LagLog, default_lag_log
    from lifeboat_dr.flows.wiring import open_witness, replication_settings

    settings = replication_settings(rb)
    way = direction(
        rb.name, primary, secondary, source=args.source, dry_run=args.dry_run, witness=open_witness(rb)
    )
    # What is loaded by now (modules, the runbook, the S3 client's model) lives until exit:
    # out of the collector's way, so a copy's many small requests do not rescan it.
    gc.freeze()
    guard = way.guard(rb.name)
    say(f"{way.state.describe()}: {way.source.uri} -> {way.destination.uri}")
    for uri in way.caught_up:
        say(
            f"{uri}: had missed a fence; now at epoch {way.state.epoch} (its writers stop at their next commit)"
        )
    doc |= {
        "site_state": way.state.describe(),
        "source": way.source.uri,
        "destination": way.destination.uri,
        "caught_up": list(way.caught_up),
        "checkpoints": [],
        "copied": 0,
        "skipped": 0,
        "refused": [],
        "failed": {},
        "copied_last": [],
        "lag": [],
    }
    failed, found, standby = False, None, None
    if not args.retention_only:
        from lifeboat_dr.core.checkpoints.layouts import discover

        layout = settings.layout
        found = discover(way.source, layout)  # also certification's view of the source
        sources = sources_to_replicate(settings, way, found)
        if not sources:
            say(f"{way.source.uri}: no committed checkpoint to replicate")
        show = (sys.stderr.isatty() if args.progress is None else args.progress) and not args.dry_run
        if rb.replication == "s3-crr" and way.source_role == "primary":
            from datetime import UTC, datetime

            from lifeboat_dr.core.bucket_replication import bucket_pass

            say(f"{way.destination.uri}: the bucket replicates (replication: s3-crr): nothing copied")
            report = bucket_pass(
                way.source,
                sources,
                rpo_target=settings.rpo_target,
                lag_log=LagLog(args.lag_log or default_lag_log(rb.name)),
                now=datetime.now(UTC),
                dry_run=args.dry_run,
            )
        else:
            report = None
        with _bars(show and report is None) as bars:
            report = report or replicate_checkpoints(
                way.source,
                way.destination,
                sources,
                rpo_target=settings.rpo_target,
                concurrency=args.concurrency,
                progress=bars,
                dry_run=args.dry_run,
                trust_committed=not args.recheck,
                guard=guard,
                also=settings.also_copied(way.source_role),
                source_found=found,
                destination_found=discover(way.destination, layout),  # the standby, listed once
            )
        standby = report.destination_found
        for t in report.transfers:
            say(_transfer_line(t, args.dry_run))
            for refusal in t.refused.values():  # one line per object no store will take
                print(f"REFUSED {refusal}", file=sys.stderr)
        for name in report.pointers + report.copied_files:
            say(f"{secondary.uri.rstrip('/')}/{name}: copied last")
        for prefix, error in report.failed.items():
            print(f"FAILED {prefix}: {error}", file=sys.stderr)
        failed = bool(report.failed)
        for lag in report.lags:
            state = "replicated" if lag.complete else "NOT replicated yet"
            over = " — OVER the RPO target" if lag.exceeded else ""
            say(
                f"lag {lag.checkpoint}: {format_duration(lag.lag)} {state} "
                f"(RPO target {format_duration(lag.rpo_target)}){over}"
            )
        if not args.dry_run:
            LagLog(args.lag_log or default_lag_log(rb.name)).append(report.lags)
        checkpoints = [_transfer_doc(t) for t in report.transfers]
        doc |= {
            "checkpoints": checkpoints,
            "copied": sum(c["copied"] for c in checkpoints),
            "skipped": sum(c["skipped"] for c in checkpoints),
            "refused": [r for t in report.transfers for r in t.refused.values()],
            "failed": dict(report.failed),
            "copied_last": [
                f"{secondary.uri.rstrip('/')}/{n}" for n in report.pointers + report.copied_files
            ],
            "lag": [lag.to_dict() for lag in report.lags],
        }
    doc["retention"] = _retention(settings, way, args, found, standby, say)
    return 1 if failed else 0


def _retention(settings, way, args, source_found, standby_found, say) -> dict:
    from lifeboat_dr.core.retention import retention_for

    result = retention_for(
        way.destination,
        way.source,
        runbook=settings.runbook,
        layout=settings.layout,
        policy=settings.retention,
        protect=args.protect,
        dry_run=args.dry_run,
        primary_found=source_found,
        secondary_found=standby_found,
        sites=way.sites,
        planned=way.state,
    )
    verb = "would delete" if args.dry_run else "deleted"
    for refusal in result.refused.values():  # one line per object retention could not name
        print(f"REFUSED {refusal}", file=sys.stderr)
    if result.paused:
        say(result.paused)
    for v in result.verdicts:
        if v.keep:
            say(f"keep {v.checkpoint.prefix} (step {v.checkpoint.step}): {v.reason}")
        else:
            say(f"{verb} {v.checkpoint.prefix} (step {v.checkpoint.step}): {v.reason}")
    if result.deleted:
        say(
            f"retention {verb} {len(result.deleted)} checkpoint(s), {result.objects} objects, {_size(result.bytes)}"
        )

    def verdict(v) -> dict:
        return {"prefix": v.checkpoint.prefix, "step": v.checkpoint.step, "reason": v.reason}

    gone = set(result.deleted)  # a dry run's: what it would delete
    return {
        "kept": [verdict(v) for v in result.verdicts if v.keep],
        "deleted": [verdict(v) for v in result.verdicts if v.checkpoint.prefix in gone],
        "objects": result.objects,
        "bytes": result.bytes,
        "refused": list(result.refused.values()),
        "paused": result.paused or None,
    }


def _transfer_doc(t) -> dict:
    return {
        "checkpoint": t.dst,
        "copied": len(t.copied) + len(t.server_copied),
        "planned": len(t.planned),
        "skipped": len(t.skipped),
        "bytes_copied": t.bytes_copied,
        "server_side": len(t.server_copied),
        "retries": t.retries,
        "hashed": len(t.hashed),
        "seconds": round(t.seconds, 3),
        "failed": dict(t.failed),
    }


def _transfer_line(t, dry_run: bool) -> str:
    if dry_run:
        return f"{t.dst}: would copy {len(t.planned)} object(s), {len(t.skipped)} already there"
    moved = len(t.copied) + len(t.server_copied)
    if not moved:
        return f"{t.dst}: up to date ({len(t.skipped)} objects)"
    line = f"{t.dst}: copied {moved} object(s) ({_size(t.bytes_copied)}"
    if t.seconds and t.bytes_copied:
        line += f", {_size(t.bytes_per_second)}/s"
    line += f"), {len(t.skipped)} already there"
    if t.server_copied:
        line += f", {len(t.server_copied)} server-side"
    if t.retries:
        line += f", {t.retries} retries"
    if t.hashed:
        line += f", {len(t.hashed)} hashed first (no CRC32C on the source)"
    return line


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


class _bars:
    """A rich progress bar per checkpoint (bytes, bytes/s), or nothing when not shown."""

    def __init__(self, show: bool):
        self.show = show
        self.progress = None

    def __enter__(self):
        if not self.show:
            return None
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=_stderr_console(),
        )
        self.progress.start()
        return self._for_checkpoint

    def __exit__(self, *exc) -> None:
        if self.progress:
            self.progress.stop()

    def _for_checkpoint(self, ckpt):
        return _Bar(self.progress, self.progress.add_task(Path(ckpt.prefix).name, total=None))


class _Bar:
    def __init__(self, progress, task):
        self.progress, self.task = progress, task

    def planned(self, objects: int, nbytes: int) -> None:
        self.progress.update(self.task, total=nbytes)

    def advance(self, nbytes: int) -> None:
        self.progress.advance(self.task, nbytes)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)
