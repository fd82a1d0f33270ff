"""`lifeboat report RUNBOOK [--out PNG] [--chain sites|URI,…] [--verify]`: the failover/drill
history and a timeline picture; `--verify` checks the ledger chain's hashes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from lifeboat_dr.core.ledger import DEFAULT_LEDGER
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.cli import COMMANDS


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
    p.add_argument(
        "--chain",
        default=None,
        help="read the ledger chain kept in `sites` (both sites' stores: RUNBOOK must be "
        "a file) or to these comma-separated store URIs (default with --verify: $LIFEBOAT_LEDGER_CHAIN or sites)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="check the ledger chain's hashes in every store; exit 1 if a record was edited, "
        "lost or disputed",
    )
    p.add_argument("--run", default=None, help="draw this run instead of the latest")
    p.add_argument("--out", default=None, help="timeline PNG (default: .lifeboat/timelines/<name>-<run>.png)")
    p.add_argument(
        "--json", action="store_true", help="print the ledger entries (or the chain's verdict) as JSON"
    )
    p.set_defaults(handler=run)


def _runbook_name(arg: str) -> str:
    path = Path(arg)
    if path.suffix not in (".yaml", ".yml"):
        return arg
    from lifeboat_dr.runbooks.loader import load_runbook

    return load_runbook(path).name


def run(args) -> int:
    from lifeboat_dr.core.ledger import LedgerFile, LedgerStore
    from lifeboat_dr.core.timeline import history_markdown, render_timeline, timeline_path

    name = _runbook_name(args.runbook)
    if args.verify or args.chain:
        chain = _chain(args)
        if args.verify:
            return _verify(chain, name, as_json=args.json)
        sink = chain
    elif args.store:
        from lifeboat_dr.providers.storage import open_store

        sink = LedgerStore(open_store(args.store))
    else:
        sink = LedgerFile(args.ledger)
    entries = sink.read(name)
    if not args.json:
        print(f"# {name}: {recorded(entries)}\n")
        print(history_markdown(entries), end="")
    if not entries:
        if args.json:
            print(json.dumps({"runbook": name, "entries": [], "timeline": None}, indent=2))
        return 0
    if args.run:
        chosen = [e for e in entries if e.run_id == args.run]
        if not chosen:
            raise ConfigError(f"no run {args.run!r} for {name} in the ledger")
        entry = chosen[0]
    else:
        entry = entries[-1]
    out = Path(args.out) if args.out else timeline_path(entry)
    if entry.phases:
        render_timeline(entry, out)
    if args.json:
        doc = {
            "runbook": name,
            "entries": [e.model_dump(mode="json") for e in entries],
            "timeline": {"run_id": entry.run_id, "png": str(out)} if entry.phases else None,
            "rca": entry.rca_reasons,
        }
        print(json.dumps(doc, indent=2))
        return 0
    if not entry.phases:
        print(f"\nrun {entry.run_id} recorded no phase yet: no timeline")
        return 0
    print(f"\ntimeline of run {entry.run_id}: {out}")
    for reason in entry.rca_reasons:
        print(f"RCA: {reason}")
    return 0


def recorded(entries) -> str:
    """How many runs of each kind the ledger holds, as people say them: "1 failover, 1 failback"."""
    counts = Counter(e.label for e in entries)
    return (
        ", ".join(f"{n} {label}{'s' if n > 1 else ''}" for label, n in counts.items()) + " recorded"
        if counts
        else "nothing recorded"
    )


def _chain(args):
    import os

    where = args.chain or os.environ.get("LIFEBOAT_LEDGER_CHAIN") or "sites"
    if Path(args.runbook).suffix in (".yaml", ".yml"):
        from lifeboat_dr.flows.wiring import chained_ledger
        from lifeboat_dr.runbooks.loader import load_runbook

        return chained_ledger(load_runbook(args.runbook), where)
    if where.strip() == "sites":
        raise ConfigError("--chain sites needs the runbook file (its sites' stores), not its name")
    from lifeboat_dr.core.ledger_chain import LedgerChain
    from lifeboat_dr.providers.storage import open_store

    return LedgerChain([open_store(u.strip()) for u in where.split(",") if u.strip()])


def _verify(chain, name: str, *, as_json: bool = False) -> int:
    report = chain.verify(name)
    where = ", ".join(s.uri for s in chain.stores)
    if as_json:
        doc = {
            "runbook": name,
            "stores": [s.uri for s in chain.stores],
            "records": report.records,
            "head": report.head,
            "intact": report.ok,
            "problems": list(report.problems),
            "warnings": list(report.warnings),
        }
        print(json.dumps(doc, indent=2))
        return 0 if report.ok else 1
    for line in report.warnings:
        print(f"warning: {line}")
    for line in report.problems:
        print(f"PROBLEM: {line}")
    verdict = "intact" if report.ok else "NOT intact"
    print(
        f"ledger chain of {name} in {where}: {report.records} trusted records, head {report.head[:16]}, {verdict}"
    )
    return 0 if report.ok else 1
