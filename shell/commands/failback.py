"""`lifeboat failback RUNBOOK`: move a failed-over job back to its recovered primary."""

from __future__ import annotations

import json
import os

from lifeboat_dr.shell.cli import RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "failback",
        help="move a failed-over job back to its recovered primary (the failback flow, in this process)",
        description="Run the failback flow against the Prefect API in PREFECT_API_URL (a temporary "
        "local server when unset): reverse replication catches the primary up, certify there, "
        "approval, fence (the primary becomes active; the secondary's job stops at its next "
        "checkpoint), resume on the primary, loss parity. Prints the outcome, RTO and RPO; the "
        "ledger entry's kind is `failback`.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--approval",
        choices=("wait", "approve", "reject"),
        default="wait",
        help="without Slack: wait for the UI or `lifeboat approve` (default), or decide at once "
        "(approve: only a runbook whose every site is on this machine; a flag is not a person)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.flows.failback import failback
    from lifeboat_dr.providers.orchestrator.prefect_api import require_api
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.shell.approval_hint import print_approval_hint

    rb = load_runbook(args.runbook)  # a bad runbook is a one-line error, not a failed flow run
    if os.environ.get("PREFECT_API_URL"):  # how to approve it is worth saying only where it can run
        require_api()
    print_approval_hint(rb, "failback", args.approval)
    result = failback(args.runbook, approval=args.approval)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>10}: {value}")
    return 0 if result["outcome"] == "completed" else 1
