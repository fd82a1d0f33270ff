"""`lifeboat drill RUNBOOK --kind K [--scope az|region] [--trainer numpy|torch]`: rehearse a failure."""

from __future__ import annotations

import json

from lifeboat_dr.flows.drills import ALL_KINDS, SCOPES, TRAINER_KINDS, kinds_for
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "drill",
        help=COMMANDS["drill"],
        description="Run the drill flow (against PREFECT_API_URL, or a temporary local server): "
        "inject the fault into a sandboxed copy of the runbook (never production), fail over, "
        "and check the result. Prints every check; exit 0 when all pass, 1 otherwise.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument("--kind", required=True, choices=(*ALL_KINDS, "all"), help="which failure to rehearse")
    p.add_argument("--scope", choices=SCOPES, default=None, help="region-outage: block a zone or a region")
    p.add_argument(
        "--trainer",
        choices=tuple(TRAINER_KINDS),
        default="numpy",
        help="the sandbox job: numpy (every kind) or torch (torchrun + DCP; process-kill)",
    )
    p.add_argument("--json", action="store_true", help="print every drill's checks as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.flows.drill import DrillFailed, drill
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    rb = load_runbook(args.runbook)  # a bad runbook is a one-line error, not a failed flow run
    kinds_for(args.kind, rb, args.trainer)  # so is a kind the runbook or the trainer does not drill
    if why := trainer_job(args.trainer).missing():
        raise ConfigError(why)
    try:
        results = drill(args.runbook, kind=args.kind, scope=args.scope, trainer=args.trainer)
    except DrillFailed as e:
        print(json.dumps({"passed": False, "failure": str(e)}) if args.json else e)
        return 1
    if args.json:
        drills = [
            {**r, "checks": [{"name": n, "passed": ok, "detail": d} for n, ok, d in r["checks"]]}
            for r in results
        ]
        print(json.dumps({"passed": True, "drills": drills}, indent=2, default=str))
        return 0
    for r in results:
        print(f"drill {r['kind']}: passed in {r['seconds']}s (run {r['run_id']}, outcome {r['outcome']})")
        for name, ok, detail in r["checks"]:
            print(f"  [{'PASS' if ok else 'FAIL'}] {name}: {detail}")
    return 0
