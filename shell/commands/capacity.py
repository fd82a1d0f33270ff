"""`lifeboat capacity RUNBOOK...`: does the secondary's declared quota cover these runbooks' outages?"""

from __future__ import annotations

import argparse
import json

from lifeboat_dr.shell.cli import COMMANDS, quick_start


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "capacity",
        help=COMMANDS["capacity"],
        description="Check the secondary's declared GPU quota (each runbook's fleet.quota, the smallest "
        "declaration of a place counting) against the seeds' minimum, pre-approved limits for 50%% of the "
        "primary's GPUs, and against the runbooks' own needs: per runbook, then per outage (each primary "
        "infra, or --fail), with the fleet plan of that outage: realtime inference first, then priority, "
        "then the cost of waiting; who runs where and who waits. Exit 0 when every check passes, 1 otherwise.",
    )
    p.add_argument(
        "runbooks", nargs="+", metavar="RUNBOOK", help="runbook YAML files, or shipped examples by name"
    )
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="INFRA",
        help="the outage to plan: a region (aws/us-east-1) or a whole cloud (aws); repeatable; "
        "default: each runbook's primary infra in turn",
    )
    p.add_argument(
        "--recovery",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="when the failed primary is expected back (4h): the longest a waiting runbook waits",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def _duration(text: str) -> float:
    from lifeboat_dr.kernel.durations import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args) -> int:
    with quick_start():  # importing the runbook model is most of this command's time
        from lifeboat_dr.flows.fleet_inputs import fleet_capacity
        from lifeboat_dr.runbooks.loader import load_runbook

    report = fleet_capacity(
        [load_runbook(f) for f in args.runbooks], domains=args.fail, recovery_s=args.recovery
    )
    ok, quota, conflicts = report.ok, report.quota, report.conflicts
    unsized, runbooks, outages = report.unsized, report.runbooks, report.outages
    if args.json:
        print(
            json.dumps(
                {
                    "ok": ok,
                    "quota": [{"place": str(p), "gpus": n} for p, n in sorted(quota.items())],
                    "conflicts": conflicts,
                    "live": list(report.live),
                    "unsized": [{"runbook": name, "why": why} for name, why in unsized],
                    "runbooks": [r.to_dict() for r in runbooks],
                    "outages": [o.to_dict() for o in outages],
                },
                indent=2,
            )
        )
        return 0 if ok else 1
    if not quota:
        print("no runbook declares fleet.quota: the secondary's GPUs are unknown, so none is planned on")
    for line in conflicts:
        print(f"quota: {line}")
    for line in report.live:
        print(f"live quota: {line}")
    for name, why in unsized:
        print(f"{name}: not planned: {why}")
    for r in runbooks:
        largest = f"largest {r.largest_place} {r.largest_gpus}" if r.largest_place else "none on any one"
        print(
            f"{r.name}: {r.gpus} GPUs; quota on its candidates {r.quota_gpus} ({largest}): "
            f"50% minimum {_verdict(r.covers_minimum)}, fits {_verdict(r.covers_need)}"
        )
    for o in outages:
        print(
            f"outage of {o.domain}: {len(o.runbooks)} runbook(s), {o.primary_gpus} GPUs lost, "
            f"{o.quota_gpus} of quota where they may go: 50% minimum {_verdict(o.covers_minimum)}; "
            f"{len(o.plan.placed())} placed, {len(o.plan.waiting())} wait"
        )
        for p in o.plan.placements:
            print(f"  {p.describe()}")
    return 0 if ok else 1


def _verdict(ok: bool) -> str:
    return "ok" if ok else "NOT MET"
