"""`lifeboat render RUNBOOK`: the runbook as Markdown to follow by hand."""

from __future__ import annotations

import os
from pathlib import Path

from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP, quick_start


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "render",
        help=COMMANDS["render"],
        description="Render a runbook as Markdown. With --write, update the copy next to the YAML.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--write", action="store_true", help="write <runbook folder>/<name>.md instead of printing"
    )
    p.set_defaults(handler=run)


def rendered_path(runbook_path: str | Path, name: str) -> Path:
    """Where the rendered copy of a runbook lives: next to its YAML, named after it."""
    return Path(runbook_path).parent / f"{name}.md"


def run(args) -> int:
    with quick_start():  # importing the runbook model is most of this command's time
        from lifeboat_dr.runbooks.loader import load_runbook
        from lifeboat_dr.runbooks.render import render_markdown

    rb = load_runbook(args.runbook)
    text = render_markdown(rb, _shown(rb.path), _advice(rb))  # rb.path: a shipped example's too
    if args.write:
        out = rendered_path(rb.path, rb.name)
        out.write_text(text)
        print(f"wrote {out}")
    else:
        print(text, end="")
    return 0


def _shown(path: Path) -> str:
    """The runbook's path for pasted commands: relative to here when inside, else absolute."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def _advice(rb) -> str | None:
    """The advisor's section, for runbooks with a `cluster:` section (the others skip importing it)."""
    if rb.cluster is None:
        return None
    from lifeboat_dr.core.advise import advice_markdown
    from lifeboat_dr.flows.wiring import advice_figures

    return advice_markdown(advice_figures(rb))
