"""`lifeboat audit RUNBOOK`: load a sample of certified checkpoints and check their loss curve."""

from __future__ import annotations

import json

from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "audit",
        help=COMMANDS["audit"],
        description="Run the audit flow: load a random sample of the certified checkpoints on "
        "<runbook>-audit, run a few steps from each and compare the losses with verify.loss_log. "
        "Exit 0 when every sampled checkpoint reproduces its curve, 1 otherwise.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument("--sample", type=int, default=3, help="how many checkpoints to load (default 3)")
    p.add_argument("--steps", type=int, default=None, help="steps per checkpoint (default parity_steps)")
    p.add_argument("--seed", default=None, help="sampling seed (default: the flow run id)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.flows.audit import AuditFailed, audit
    from lifeboat_dr.runbooks.loader import load_runbook

    load_runbook(args.runbook)
    state = audit(args.runbook, sample_size=args.sample, steps=args.steps, seed=args.seed, return_state=True)
    if state.is_failed():  # the flow printed the report; the verdict is one line, exit 1
        failure = state.message or "the audit flow run failed"
        if not args.json:
            raise AuditFailed(failure)
        print(json.dumps({"passed": False, "failure": failure}))
        return 1
    result = state.result()
    if args.json:
        print(json.dumps({"passed": True, **result}, indent=2, default=str))
        return 0
    print(f"audit passed: checkpoints {result['checkpoints']} (seed {result['seed']}) on {result['cluster']}")
    return 0
