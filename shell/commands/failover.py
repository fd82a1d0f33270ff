"""`lifeboat failover RUNBOOK`: run the failover flow from a terminal (or CI, with --dry-run)."""

from __future__ import annotations

import json

from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "failover",
        help=COMMANDS["failover"],
        description="Run the failover flow against the Prefect API in PREFECT_API_URL (a temporary "
        "local server when unset). Prints the outcome, RTO, RPO and the timeline picture's path.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--dry-run", action="store_true", help="rehearse in a sandbox: local stores and compute, no cloud"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="fail over even if the detection quorum does not confirm an outage",
    )
    p.add_argument(
        "--approval",
        choices=("wait", "approve", "reject"),
        default=None,
        help="without Slack: wait for the UI or `lifeboat approve` (default; a dry run approves "
        "unless told to wait), or decide at once (approve: only a dry run or a runbook whose every "
        "site is on this machine; a flag is not a person)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.flows.failover import failover, outcome_of
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task
    from lifeboat_dr.shell.approval_hint import print_approval_hint

    rb = load_runbook_and_task(
        args.runbook
    )  # a bad runbook or task YAML is a one-line error, not a failed flow run
    if not args.dry_run or args.approval == "wait":  # a dry run approves unless told to wait
        print_approval_hint(rb, "failover", args.approval)
    from lifeboat_dr.core.ledger import LedgerFile

    LedgerFile().ensure_writable()  # likewise an unwritable ledger: before anything is fenced
    state = failover(
        args.runbook, dry_run=args.dry_run, force=args.force, approval=args.approval, return_state=True
    )
    result = outcome_of(state)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>10}: {value}")
    return 0 if result["outcome"] == "completed" else 1
