"""`lifeboat certify RUNBOOK [--at TIME] [--json] [--deep] [--primary-down]`: which replica checkpoint can we
resume from, and how much work would an outage at TIME cost.

Exit 0: a checkpoint is certified within the RPO target; 1: certified but over target;
2: none certified (or the stores could not be read)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError
from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certify",
        help=COMMANDS["certify"],
        description="Find the newest checkpoint on the secondary store that is complete and equal "
        "to the primary's (or, with the primary down, to its manifest); report the RPO.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--at", default=None, metavar="TIME", help="reference time for the RPO, ISO 8601 (default: now)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--deep", action="store_true", help="stream and checksum every object, not just metadata")
    p.add_argument(
        "--primary-down",
        action="store_true",
        help="the outage is confirmed: never ask the primary's store (manifests and receipts decide; "
        "its site state counts as unknown). Without it a primary that does not answer costs one "
        "probe deadline (LIFEBOAT_PROBE_DEADLINE)",
    )
    p.set_defaults(handler=run)


def parse_time(text: str | None) -> datetime:
    if text is None or text == "now":
        return datetime.now(UTC)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--at {text!r}: not an ISO 8601 time such as 2026-11-30T08:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def run(args) -> int:
    from lifeboat_dr.core.certify import verdict
    from lifeboat_dr.flows.wiring import certify_runbook
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(args.runbook)
    at = parse_time(args.at)
    try:
        down = "the outage is confirmed (--primary-down)" if args.primary_down else None
        report = certify_runbook(rb, at=at, deep=args.deep, primary_down=down)
    except ConfigError:
        raise
    except LifeboatError as e:
        print(f"lifeboat certify: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)  # 75 when the site state is unknown: retry
    code = verdict(report, rb.rpo_target)
    if args.json:
        doc = report.to_dict() | {"rpo_target": rb.rpo_target.total_seconds(), "exit": code}
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(format_report(report, rb.rpo_target))
    return code


def format_report(report, rpo_target) -> str:
    lines = [
        f"replica   {report.replica}  (layout {report.layout or '-'}, mode {report.mode})",
        f"source    {report.source or '-'}"
        + (f"  UNREACHABLE: {report.source_error}" if report.source_error else ""),
    ]
    c = report.certified
    if c is None:
        lines.append("CERTIFIED none: no checkpoint on the replica is safe to resume from")
    else:
        over = report.rpo > rpo_target
        lines += [
            f"CERTIFIED step {c.step}  {c.uri}",
            f"          written {c.written_at.isoformat()} ({c.written_at_basis})",
            f"RPO       {format_duration(report.rpo)} (target {format_duration(rpo_target)}): "
            + ("TARGET EXCEEDED" if over else "within target"),
        ]
        verified = ", ".join(f"{n} by {how}" for how, n in sorted(c.verified_by.items()))
        lines.append(f"verified  {verified or 'nothing to compare'}")
    if report.replication_lag is not None:
        lines.append(
            f"lag       {format_duration(report.replication_lag)} (newest source step {report.newest_source_step})"
        )
    if report.rejected:
        lines.append("REJECTED  (newer than the certified one)")
        for r in report.rejected:
            lines.append(f"  step {r.step:<10} {r.reason:<18} {r.detail}")
            lines += [f"  {'':<15} {'':<18} {p}" for p in r.problems[1:]]
            if r.more:
                lines.append(f"  {'':<15} {'':<18} ... and {r.more} more")
    lines += [f"note      {n}" for n in report.notes]
    calls = " ".join(f"{k}={v}" for k, v in report.calls.items())
    lines.append(
        f"calls     {calls}; bytes read: {report.object_bytes_read} object, {report.metadata_bytes_read} metadata"
    )
    return "\n".join(lines)
