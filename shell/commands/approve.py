"""`lifeboat approve RUN_ID [--reject] --reason …`: decide a paused failover from a terminal.

Who decides is not an argument: the identity proxy in front of Prefect authenticates you
(PREFECT_API_URL pointing at the proxy, PREFECT_API_AUTH_STRING=`login:password`, or your
SSO's token) and `lifeboat serve` signs the decision with your login; a resume sent straight
to Prefect is refused by the flow and recorded (docs/approvals.md)."""

from __future__ import annotations

from uuid import UUID

from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed
from lifeboat_dr.shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "approve",
        help=COMMANDS["approve"],
        description="Resume a failover run paused at its approval gate with your decision.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the Prefect flow run id shown on the approval card")
    p.add_argument("--reject", action="store_true", help="reject: stop the failover")
    p.add_argument("--reason", required=True, help="why; recorded in the ledger and on the card")
    p.set_defaults(handler=run)


def run(args) -> int:
    try:
        run_id = UUID(args.run_id)
    except ValueError:
        raise ConfigError(f"{args.run_id!r} is not a flow run id (a UUID, as on the approval card)") from None
    approved = not args.reject
    from lifeboat_dr.providers.orchestrator.prefect_api import require_api_url, resume_run

    require_api_url()
    try:
        resume_run(run_id, {"approved": approved, "reason": args.reason})
    except (NotFound, PreconditionFailed) as e:
        raise ConfigError(str(e)) from None
    print(
        f"sent: {'approve' if approved else 'reject'} run {run_id}: {args.reason} "
        "(the run records whether it was accepted, and as whom)"
    )
    return 0
