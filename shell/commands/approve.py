"""`lifeboat approve RUN_ID [--reject | --job RUNBOOK…] --reason …`: decide a paused run from a
terminal (a fleet's plan whole, or only the placed jobs named), and wait for the run to accept
or refuse the decision.

Who decides is not an argument: the identity proxy in front of Prefect authenticates you
(PREFECT_API_URL pointing at the proxy, PREFECT_API_AUTH_STRING=`login:password`, or your
SSO's token) and `lifeboat serve` signs the decision with your login. The run then checks the
signature and the runbook's allow-list and says whether it accepted; this command exits 0
only when it did. A resume sent straight to Prefect is refused by the flow (docs/approvals.md)."""

from __future__ import annotations

import json
import time
from uuid import UUID

from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.kernel.text import one_line
from lifeboat_dr.shell.cli import COMMANDS

# Prefect pauses a run first and saves its approval form's schema just after; a resume in
# between is refused with this reason. A decision sent the moment the card appears waits
# this long for the form before it is called missing.
FORM_NOT_SAVED = "Run input schema not found"
FORM_WAIT_S = 10.0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "approve",
        help=COMMANDS["approve"],
        description="Resume a run paused at its approval gate with your decision, and wait for its verdict.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the Prefect flow run id shown on the approval card")
    p.add_argument("--reject", action="store_true", help="reject: stop the failover")
    p.add_argument(
        "--job",
        action="append",
        metavar="RUNBOOK",
        help="a fleet failover: approve only this placed job (repeat for more); the others are denied",
    )
    p.add_argument("--reason", required=True, help="why; recorded in the ledger and on the card")
    p.add_argument(
        "--wait", type=float, default=60.0, metavar="S", help="seconds to wait for the run's verdict (60)"
    )
    p.add_argument("--json", action="store_true", help="print the run's verdict as JSON")
    p.set_defaults(handler=run)


def run(args, *, poll_s: float = 0.5) -> int:
    try:
        run_id = str(UUID(args.run_id))
    except ValueError:
        raise ConfigError(f"{args.run_id!r} is not a flow run id (a UUID, as on the approval card)") from None
    approved = not args.reject
    if args.job and args.reject:
        raise ConfigError(
            "--job approves jobs of a fleet one by one; --reject rejects the whole plan: give one"
        )
    verb = f"approve {', '.join(args.job)}" if args.job else ("approve" if approved else "reject")
    run_input = {"approved": approved, "reason": args.reason} | ({"jobs": args.job} if args.job else {})
    from lifeboat_dr.providers.orchestrator.prefect_api import read_run_input, require_api_url, send_decision

    require_api_url()
    form_deadline = time.monotonic() + FORM_WAIT_S
    while True:
        try:
            answer, verdict_key = send_decision(run_id, run_input)
        except (NotFound, PreconditionFailed) as e:
            raise ConfigError(str(e)) from None
        if answer.get("status") == "ACCEPT":
            break
        why = str((answer.get("details") or {}).get("reason") or answer.get("status") or "no answer")
        if not why.startswith(FORM_NOT_SAVED):
            raise ConfigError(f"Prefect did not resume run {run_id}: {one_line(why, 300)}")
        if time.monotonic() >= form_deadline:
            raise ConfigError(
                f"run {run_id} is paused, but Prefect has no approval form for it after {FORM_WAIT_S:g}s "
                f"({FORM_NOT_SAVED}): is it paused at a Lifeboat gate? See the run's page"
            )
        time.sleep(poll_s)
    if verdict_key is None:
        raise ConfigError(
            f"run {run_id} was resumed, but not through the identity proxy: nothing signed who you are, "
            "so the run refuses the decision (point PREFECT_API_URL at the proxy's /api)"
        )
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        try:
            verdict = read_run_input(run_id, verdict_key)
        except ProviderUnavailable:
            verdict = None  # a blip while the run is busy: ask again
        if isinstance(verdict, dict) and isinstance(verdict.get("accepted"), bool):
            why = one_line(verdict.get("why") or "", 300)
            if not verdict["accepted"]:
                raise ConfigError(f"run {run_id} refused your decision to {verb}: {why}")
            if args.json:
                print(
                    json.dumps(
                        {
                            "run_id": run_id,
                            "decision": "approve" if approved else "reject",
                            "jobs": args.job,
                            "accepted": True,
                            "reason": args.reason,
                        }
                    )
                )
            else:
                print(f"run {run_id} accepted your decision to {verb}: {args.reason}")
            return 0
        time.sleep(poll_s)
    raise ConfigError(
        f"run {run_id} took your decision to {verb} but gave no verdict within {args.wait:g}s: "
        "see its approval trail (artifact approval-<runbook>)"
    )
