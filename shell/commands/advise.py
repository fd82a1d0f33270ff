"""`lifeboat advise [RUNBOOK] [flags]`: checkpoint interval and DR budget from the cluster's numbers."""

from __future__ import annotations

import argparse
import json

from lifeboat_dr.core.advise import INPUTS, advise, format_text, resolve_inputs
from lifeboat_dr.kernel.durations import parse_duration
from lifeboat_dr.shell.cli import COMMANDS

EPILOG = """\
Inputs come from the runbook's `cluster:` section (plus checkpoint.cadence and
checkpoint.retention.keep_last); every flag overrides the runbook. Durations take a unit:
90s, 15m, 2h, 5d, 1h30m.

Outputs: Young's interval sqrt(2*C*M) and Daly's higher-order interval (advised), where M is
the cluster MTBF; expected waste (checkpoint writes + restarts + rework, share of wall time)
at the advised interval and at the current cadence; loss per failure (rework (T+C)/2 plus
restart) in time, GPU-hours and dollars; expected and worst RPO; the DR budget per month
(checkpoint storage, transfer, standby) as a share of GPU spend, next to the reference
ranges 15-20% for a 30-60 min RTO and 35-50% for under 5 min. See docs/advise.md.
"""


def _duration(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _number(kind):
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None

    return parse


_TYPES = {
    "gpus": _number(int),
    "keep_last": _number(int),
    "checkpoint_size_gb": _number(float),
    "gpu_hour_usd": _number(float),
    "storage_usd_per_gb_month": _number(float),
    "transfer_usd_per_gb": _number(float),
    "standby_fraction": _number(float),
    "standby_gpu_hour_usd": _number(float),
}
_METAVARS = {"gpus": "N", "keep_last": "N", "checkpoint_size_gb": "GB", "standby_fraction": "SHARE"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "advise",
        help=COMMANDS["advise"],
        description="Advise a checkpoint interval (Young, Daly) and size the DR budget.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runbook", metavar="RUNBOOK", nargs="?", help="runbook YAML file (optional)")
    rate = p.add_mutually_exclusive_group()
    for name, (flag, text) in INPUTS.items():
        target = rate if name in ("mtbf", "gpu_mtbf") else p
        if name == "standby":
            target.add_argument(flag, dest=name, choices=("cold", "warm", "hot"), help=text)
            continue
        kind = _TYPES.get(name, _duration)
        metavar = _METAVARS.get(name, "DURATION" if kind is _duration else "USD")
        target.add_argument(flag, dest=name, type=kind, metavar=metavar, help=text)
    p.add_argument(
        "--json", action="store_true", help="print the inputs and results as JSON (seconds, US dollars)"
    )
    p.set_defaults(handler=run)


def _load(path: str):
    from lifeboat_dr.flows.wiring import advice_figures
    from lifeboat_dr.runbooks.loader import load_runbook

    return advice_figures(load_runbook(path))


def run(args) -> int:
    figures = _load(args.runbook) if args.runbook else None
    advice = advise(resolve_inputs(figures, {name: getattr(args, name) for name in INPUTS}))
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_text(advice), end="")
    return 0
