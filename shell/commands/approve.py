"""`lifeboat approve RUN_ID [--reject] --reason …`: decide a paused failover from a terminal."""

from __future__ import annotations

import getpass
from uuid import UUID

from lifeboat.errors import ConfigError, NotFound, PreconditionFailed
from shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "approve",
        help=COMMANDS["approve"],
        description="Resume a failover run paused at its approval gate with your decision.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the Prefect flow run id shown on the approval card")
    p.add_argument("--reject", action="store_true", help="reject: stop the failover")
    p.add_argument("--reason", required=True, help="why; recorded in the ledger and on the card")
    p.add_argument("--approver", default=None, help="your name (default: your login name)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from providers.chat.base import ApprovalDecision, Via

    try:
        run_id = UUID(args.run_id)
    except ValueError:
        raise ConfigError(f"{args.run_id!r} is not a flow run id (a UUID, as on the approval card)") from None
    decision = ApprovalDecision(
        approved=not args.reject,
        reason=args.reason,
        approver=args.approver or getpass.getuser(),
        via=Via.cli,
    )
    from providers.orchestrator.prefect_api import require_api_url, resume_run

    require_api_url()
    try:
        resume_run(run_id, decision.model_dump(mode="json"))
    except (NotFound, PreconditionFailed) as e:
        raise ConfigError(str(e)) from None
    print(
        f"{'approved' if decision.approved else 'rejected'} run {run_id} as {decision.approver}: {decision.reason}"
    )
    return 0
