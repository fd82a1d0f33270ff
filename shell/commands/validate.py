"""`lifeboat validate FILE...`: check runbooks before an incident does."""

from __future__ import annotations

import json
import os
import sys

from lifeboat_dr.shell.cli import COMMANDS, quick_start


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help=COMMANDS["validate"],
        description="Validate runbook YAML files. Exit 0 when all are valid, 1 otherwise (also when two "
        "of them keep checkpoints on overlapping stores: same bucket, one prefix inside the other). "
        "Also warns (without failing) when the control plane in this environment (PREFECT_API_URL, "
        "the ledger, the signal state) would go down with the runbook's primary site, when the "
        "probes reach fewer independent targets than the quorum (a dark store would be one vote), when "
        "the periods `lifeboat deploy` would give its watch, replicate and certify (printed) cannot "
        "meet its RPO or RTO target, when its declared fleet.quota holds its GPUs on none of its candidates, and, "
        "with PREFECT_API_URL set, when a work pool of Lifeboat's deployments lets a flow run set its "
        "own command, environment or working directory.",
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="runbook YAML files, or shipped examples by name (demo, …)"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    with quick_start():  # importing the runbook model is most of this command's time
        from lifeboat_dr.core.cadences import plan_cadences
        from lifeboat_dr.core.detection.targets import detection_warnings
        from lifeboat_dr.core.resume import parity_warnings
        from lifeboat_dr.core.shared_fate import shared_fate_warnings
        from lifeboat_dr.flows.deploy import cadence_inputs, shipped_template, template_periods
        from lifeboat_dr.flows.fleet_inputs import fit_warnings
        from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task
        from lifeboat_dr.runbooks.loader import RunbookInvalid
        from lifeboat_dr.runbooks.overlap import overlapping_runbooks

    failed = False
    valid = []
    report = {"files": [], "problems": [], "warnings": []}  # --json: the same lines, as data
    periods = template_periods(shipped_template())
    for file in args.files:
        try:
            rb = load_runbook_and_task(file)
        except RunbookInvalid as e:
            failed = True
            report["files"].append({"file": file, "ok": False, "problems": list(e.problems)})
            if not args.json:
                for problem in e.problems:
                    print(problem, file=sys.stderr)
            continue
        cadences = plan_cadences(cadence_inputs(rb), periods)
        if not args.json:
            print(
                f"{file}: ok ({rb.name}, {rb.workload.value}, RPO {_fmt(rb.rpo_target)}, RTO {_fmt(rb.rto_target)})"
            )
            print(f"{file}: deployed: {cadences.summary()}")
        warnings = [
            *cadences.warnings,
            *detection_warnings(rb.detection, rb.primary, rb.secondary, base_dir=rb.base_dir),
            *shared_fate_warnings(rb.primary, os.environ, base_dir=rb.base_dir),
            *parity_warnings(rb.workload.value, rb.verify.parity_steps, rb.verify.parity_min_coverage),
            *fit_warnings(rb),
        ]
        report["files"].append(
            {
                "file": file,
                "ok": True,
                "name": rb.name,
                "workload": rb.workload.value,
                "rpo_target_s": rb.rpo_target.total_seconds(),
                "rto_target_s": rb.rto_target.total_seconds(),
                "deployed": cadences.summary(),
                "warnings": warnings,
            }
        )
        if not args.json:
            for warning in warnings:
                print(f"{file}: warning: {warning}", file=sys.stderr)
        valid.append((file, rb))
    for line in overlapping_runbooks(valid):
        failed = True
        report["problems"].append(line)
        if not args.json:
            print(line, file=sys.stderr)
    if os.environ.get("PREFECT_API_URL"):  # the pools Lifeboat's deployments run on, once
        from lifeboat_dr.providers.orchestrator.prefect_api import pool_warnings

        for warning in pool_warnings():
            report["warnings"].append(warning)
            if not args.json:
                print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({**report, "ok": not failed}, indent=2))
    return 1 if failed else 0


def _fmt(td) -> str:
    from lifeboat_dr.kernel.durations import format_duration

    return format_duration(td)
