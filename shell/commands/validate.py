"""`lifeboat validate FILE...`: check runbooks before an incident does."""

from __future__ import annotations

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
        "probes reach fewer independent targets than the quorum (a dark store would be one vote), and, "
        "with PREFECT_API_URL set, when a work pool of Lifeboat's deployments lets a flow run set its "
        "own command, environment or working directory.",
    )
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="runbook YAML files, or shipped examples by name (demo, …)"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    with quick_start():  # importing the runbook model is most of this command's time
        from lifeboat_dr.core.detection.targets import detection_warnings
        from lifeboat_dr.core.resume import parity_warnings
        from lifeboat_dr.core.shared_fate import shared_fate_warnings
        from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task
        from lifeboat_dr.runbooks.loader import RunbookInvalid
        from lifeboat_dr.runbooks.overlap import overlapping_runbooks

    failed = False
    valid = []
    for file in args.files:
        try:
            rb = load_runbook_and_task(file)
        except RunbookInvalid as e:
            failed = True
            for problem in e.problems:
                print(problem, file=sys.stderr)
            continue
        print(
            f"{file}: ok ({rb.name}, {rb.workload.value}, RPO {_fmt(rb.rpo_target)}, RTO {_fmt(rb.rto_target)})"
        )
        warnings = [
            *detection_warnings(rb.detection, rb.primary, rb.secondary, base_dir=rb.base_dir),
            *shared_fate_warnings(rb.primary, os.environ, base_dir=rb.base_dir),
            *parity_warnings(rb.workload.value, rb.verify.parity_steps, rb.verify.parity_min_coverage),
        ]
        for warning in warnings:
            print(f"{file}: warning: {warning}", file=sys.stderr)
        valid.append((file, rb))
    for line in overlapping_runbooks(valid):
        failed = True
        print(line, file=sys.stderr)
    if os.environ.get("PREFECT_API_URL"):  # the pools Lifeboat's deployments run on, once
        from lifeboat_dr.providers.orchestrator.prefect_api import pool_warnings

        for warning in pool_warnings():
            print(f"warning: {warning}", file=sys.stderr)
    return 1 if failed else 0


def _fmt(td) -> str:
    from lifeboat_dr.kernel.durations import format_duration

    return format_duration(td)
