"""`lifeboat render RUNBOOK`: the runbook as Markdown to follow by hand."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runbooks.loader import load_runbook
from runbooks.render import render_markdown


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "render",
        help="print a runbook as Markdown, with the manual commands for each step",
        description="Render a runbook as Markdown. With --write, update the copy next to the YAML.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help="runbook YAML file")
    p.add_argument(
        "--write", action="store_true", help="write <runbook folder>/<name>.md instead of printing"
    )
    p.set_defaults(handler=run)


def rendered_path(runbook_path: str | Path, name: str) -> Path:
    """Where the rendered copy of a runbook lives: next to its YAML, named after it."""
    return Path(runbook_path).parent / f"{name}.md"


def run(args) -> int:
    rb = load_runbook(args.runbook)
    text = render_markdown(rb, os.path.relpath(args.runbook))
    for warning in rb.warnings():
        print(f"{args.runbook}: warning: {warning}", file=sys.stderr)
    if args.write:
        out = rendered_path(args.runbook, rb.name)
        out.write_text(text)
        print(f"wrote {out}")
    else:
        print(text, end="")
    return 0
