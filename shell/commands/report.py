"""`lifeboat report RUNBOOK [--out PNG]`: the failover/drill history and a timeline picture."""

from __future__ import annotations

from pathlib import Path

from lifeboat.errors import ConfigError
from lifeboat.ledger import DEFAULT_LEDGER
from shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help=COMMANDS["report"],
        description="Print the RTO/RPO history of a protected job from the ledger and write a "
        "Gantt picture of its latest (or a chosen) run.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help="runbook YAML file, or the runbook's name")
    p.add_argument(
        "--ledger",
        default=None,
        help=f"ledger JSON-lines file (default: $LIFEBOAT_LEDGER or {DEFAULT_LEDGER})",
    )
    p.add_argument("--store", default=None, help="read the ledger from this store URI instead of the file")
    p.add_argument("--run", default=None, help="draw this run instead of the latest")
    p.add_argument("--out", default=None, help="timeline PNG (default: .lifeboat/timelines/<name>-<run>.png)")
    p.set_defaults(handler=run)


def _runbook_name(arg: str) -> str:
    path = Path(arg)
    if path.suffix not in (".yaml", ".yml"):
        return arg
    from runbooks.loader import load_runbook

    return load_runbook(path).name


def run(args) -> int:
    from lifeboat.ledger import LedgerFile, LedgerStore
    from lifeboat.timeline import history_markdown, render_timeline, timeline_path

    name = _runbook_name(args.runbook)
    if args.store:
        from providers.storage import open_store

        sink = LedgerStore(open_store(args.store))
    else:
        sink = LedgerFile(args.ledger)
    entries = sink.read(name)
    print(f"# {name}: {len(entries)} recorded failover(s) and drill(s)\n")
    print(history_markdown(entries), end="")
    if not entries:
        return 0
    if args.run:
        chosen = [e for e in entries if e.run_id == args.run]
        if not chosen:
            raise ConfigError(f"no run {args.run!r} for {name} in the ledger")
        entry = chosen[0]
    else:
        entry = entries[-1]
    if not entry.phases:
        print(f"\nrun {entry.run_id} recorded no phase yet: no timeline")
        return 0
    out = Path(args.out) if args.out else timeline_path(entry)
    render_timeline(entry, out)
    print(f"\ntimeline of run {entry.run_id}: {out}")
    for reason in entry.rca_reasons:
        print(f"RCA: {reason}")
    return 0
