"""`lifeboat fleet-failover RUNBOOK...`: fail the runbooks of one outage over together (the
`fleet-failover` flow, run in this process): one plan, one decision, each its own failover."""

from __future__ import annotations

import json
import sys

from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet-failover",
        help=COMMANDS["fleet-failover"],
        description="Run the fleet-failover flow against the Prefect API in PREFECT_API_URL (a "
        "temporary local server when unset): plan the runbooks against the secondary's declared "
        "quota, ask one approval for the plan (whole or per job), then run each approved job's own "
        "failover. Prints each job's outcome and RTO against its class target, or its expected wait. "
        "Exit 0 when every approved job completed (jobs that wait or were denied included), 1 otherwise.",
    )
    p.add_argument("runbooks", nargs="+", metavar="RUNBOOK", help=RUNBOOK_HELP + "; every one the outage hit")
    p.add_argument(
        "--dry-run", action="store_true", help="rehearse: each placed failover in its own sandbox, no cloud"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="fail over even if a runbook's detection quorum does not confirm an outage",
    )
    p.add_argument(
        "--approval",
        choices=("wait", "approve", "reject"),
        default=None,
        help="as for `lifeboat failover`: wait for the UI or `lifeboat approve` (default; a dry run "
        "approves unless told to wait), or decide at once (approve: only a dry run or runbooks whose "
        "every site is on this machine)",
    )
    p.add_argument(
        "--recovery",
        metavar="DURATION",
        default=None,
        help="when the primary is expected back (4h): the longest a job waits",
    )
    p.add_argument("--json", action="store_true", help="print the fleet's entry as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.fleet_failover import fleet_failover
    from lifeboat_dr.kernel.durations import parse_duration
    from lifeboat_dr.kernel.errors import ConfigError
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task

    for path in args.runbooks:  # a bad runbook or task YAML is a one-line error, not a failed run
        load_runbook_and_task(path)
    if args.recovery is not None:
        try:
            parse_duration(args.recovery)
        except ValueError as e:
            raise ConfigError(f"--recovery: {e}") from None
    if not args.dry_run or args.approval == "wait":
        print(
            "lifeboat fleet-failover: the run pauses for one approval of the fleet's plan (an approver "
            "on every placed runbook's list; the shortest timeout's policy applies). Decide in the "
            "Prefect UI, the whole plan or job by job, or with `lifeboat approve RUN_ID --reason … "
            "[--job RUNBOOK …]` (docs/fleet.md).",
            file=sys.stderr,
            flush=True,
        )
    LedgerFile().ensure_writable()  # before anything is fenced
    state = fleet_failover(
        runbooks=args.runbooks,
        dry_run=args.dry_run,
        force=args.force,
        approval=args.approval,
        recovery=args.recovery,
        return_state=True,
    )
    result = state.result(raise_on_failure=False)
    if not isinstance(result, dict):  # it could not plan or ask: nothing of any job acted
        raise ConfigError((state.message or state.type.value).removeprefix("fleet failover: "))
    if args.json:
        print(json.dumps({"state": state.type.value, "message": state.message, **result}, indent=2))
    else:
        for job in result["jobs"]:
            print(f"{job['runbook']}: {job_line(job)}")
        print(f"{result['fleet']}: {state.message}")
        print(f"decision: {result['decision']}")
    return 0 if state.is_completed() else 1


def job_line(job: dict) -> str:
    """`completed, RTO 12s against 1800s: met`; `waiting, expected wait 4.0h`; `denied`."""
    if job["rto_s"] is not None:
        met = "met" if job["met"] else "MISSED"
        return f"{job['outcome']}, RTO {job['rto_s']:.0f}s against {job['rto_target_s']:.0f}s: {met}"
    if job["outcome"] == "waiting":
        wait = job["expected_wait_s"]
        return "waiting, expected wait " + (f"{wait / 3600:.1f}h" if wait else "unknown")
    return job["outcome"]
