"""`lifeboat approve RUN_ID [--reject] --reason …`: decide a paused failover from a terminal."""

from __future__ import annotations

import getpass
from uuid import UUID

from lifeboat.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "approve",
        help="approve or reject a failover waiting at its approval gate",
        description="Resume a failover run paused at its approval gate with your decision.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the Prefect flow run id shown on the approval card")
    p.add_argument("--reject", action="store_true", help="reject: stop the failover")
    p.add_argument("--reason", required=True, help="why; recorded in the ledger and on the card")
    p.add_argument("--approver", default=None, help="your name (default: your login name)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat.approval import ApprovalDecision, Via

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
    from prefect.exceptions import FlowPauseTimeout, NotPausedError, ObjectNotFound
    from prefect.flow_runs import resume_flow_run
    from prefect.settings import get_current_settings

    if not get_current_settings().api.url:  # Prefect would start an empty temporary server instead
        raise ConfigError("PREFECT_API_URL is not set: point it at the Prefect server running the failover")

    try:
        resume_flow_run(run_id, run_input=decision.model_dump(mode="json"), _sync=True)
    except ObjectNotFound:
        raise ConfigError(f"no flow run {run_id} on this Prefect server") from None
    except NotPausedError:
        raise ConfigError(
            f"run {run_id} is not waiting for approval (already decided, or finished)"
        ) from None
    except FlowPauseTimeout:
        raise ConfigError(f"run {run_id} waited too long and can no longer be resumed") from None
    print(
        f"{'approved' if decision.approved else 'rejected'} run {run_id} as {decision.approver}: {decision.reason}"
    )
    return 0
